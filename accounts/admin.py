from django.contrib import admin

from accounts.models import ApiKey, AuditEvent, Membership, Organization, SubAccount, User


@admin.register(User)
class UserAdmin(admin.ModelAdmin):
    list_display = ("email", "full_name", "is_active", "is_staff", "date_joined")
    search_fields = ("email", "full_name")
    exclude = ("password",)


@admin.register(Organization)
class OrganizationAdmin(admin.ModelAdmin):
    list_display = ("name", "slug", "currency", "billing_mode", "discount_rate", "is_active")
    search_fields = ("name", "slug")


admin.site.register(Membership)
admin.site.register(SubAccount)


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin):
    list_display = ("name", "public_id", "organization", "status", "created_at")
    exclude = ("secret_hash", "previous_secret_hash")
    readonly_fields = ("public_id", "previous_public_id")


@admin.register(AuditEvent)
class AuditEventAdmin(admin.ModelAdmin):
    list_display = ("created_at", "organization", "actor_label", "action", "target_label")

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False
