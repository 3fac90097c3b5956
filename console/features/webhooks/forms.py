"""Console forms: parse input; the services validate (their errors land on
the form's fields)."""

from __future__ import annotations

from django import forms
from django.conf import settings
from django.utils.translation import gettext_lazy

from console.features.webhooks.models import ALL_EVENTS, DeliveryStatus, DestinationKind, EventType


def event_choices():
    return [(ALL_EVENTS, gettext_lazy("All events")), *EventType.choices]


class DestinationForm(forms.Form):
    name = forms.CharField(label=gettext_lazy("Name"), max_length=120)
    kind = forms.ChoiceField(label=gettext_lazy("Kind"), choices=DestinationKind.choices)
    url = forms.CharField(
        label=gettext_lazy("URL"),
        required=False,
        max_length=2000,
        help_text=gettext_lazy(
            "Where to POST: your endpoint, or the chat app's incoming-webhook URL, at a public "
            "address. Never shown again in full. Not used for e-mail."
        ),
        widget=forms.TextInput(attrs={"placeholder": "https://hooks.example.com/console"}),
    )
    recipients = forms.CharField(
        label=gettext_lazy("E-mail recipients"),
        required=False,
        max_length=5000,
        help_text=gettext_lazy(
            "E-mail only: roles (owner, admin, finance, developer, viewer) and/or addresses, "
            "one per line."
        ),
        widget=forms.Textarea(attrs={"rows": 3}),
    )
    events = forms.MultipleChoiceField(
        label=gettext_lazy("Events"),
        choices=event_choices,
        widget=forms.CheckboxSelectMultiple,
    )
    language = forms.ChoiceField(
        label=gettext_lazy("Message language"),
        choices=settings.LANGUAGES,
        help_text=gettext_lazy("For chat messages, and e-mails to addresses that are not members."),
    )
    enabled = forms.BooleanField(label=gettext_lazy("Enabled"), required=False, initial=True)

    def __init__(self, *args, editing: bool = False, **kwargs):
        super().__init__(*args, **kwargs)
        if editing:
            del self.fields["kind"]
            self.fields["url"].help_text = gettext_lazy(
                "Leave empty to keep the current URL. Never shown again in full."
            )

    def service_data(self) -> dict:
        """The fields for the service; an empty URL or recipient list is left
        out (kept as it is when editing, asked for when creating)."""
        data = dict(self.cleaned_data)
        for name in ("url", "recipients"):
            if not data.get(name):
                data.pop(name, None)
        return data


class DeliveryFilterForm(forms.Form):
    destination = forms.TypedChoiceField(
        label=gettext_lazy("Destination"), required=False, coerce=int, empty_value=None
    )
    status = forms.ChoiceField(
        label=gettext_lazy("Status"),
        required=False,
        choices=[("", gettext_lazy("Any")), *DeliveryStatus.choices],
    )

    def __init__(self, *args, destinations=(), **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["destination"].choices = [
            ("", gettext_lazy("Any")),
            *((d.pk, d.name) for d in destinations),
        ]
