"""factory_boy factories for the accounts models. API keys are issued through
the ``api_key_issue`` service (see ``issue_key``), never built by hand, so the
secret handling under test is the real one."""

from __future__ import annotations

import factory

from accounts.models import ApiKey, Membership, Organization, Role, SubAccount, User

TEST_PASSWORD = "correct horse battery staple 42"


class UserFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = User

    email = factory.Sequence(lambda n: f"user{n}@example.com")
    full_name = factory.Sequence(lambda n: f"User {n}")
    password = factory.django.Password(TEST_PASSWORD)


class OrganizationFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Organization

    name = factory.Sequence(lambda n: f"Org {n}")
    slug = factory.Sequence(lambda n: f"org-{n}")


class MembershipFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Membership

    user = factory.SubFactory(UserFactory)
    organization = factory.SubFactory(OrganizationFactory)
    role = Role.DEVELOPER


class SubAccountFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = SubAccount
        skip_postgeneration_save = True

    organization = factory.SubFactory(OrganizationFactory)
    name = factory.Sequence(lambda n: f"team-{n}")

    @factory.post_generation
    def members(obj, create, extracted, **kwargs):
        if create and extracted:
            obj.members.set(extracted)


_key_counter = iter(range(1, 10**9))


def issue_key(actor, name: str | None = None, **fields) -> tuple[ApiKey, str]:
    """Issue a gateway key through the real service; returns ``(key, raw)``."""
    from accounts.services import api_key_issue

    return api_key_issue(actor=actor, name=name or f"key-{next(_key_counter)}", **fields)
