"""The form that starts a load test."""

from __future__ import annotations

from django import forms
from django.conf import settings
from django.utils.translation import gettext_lazy as _

from console.features.capacity.models import Billing
from console.features.capacity.services import DEFAULT_STEPS, MAX_STEP_SECONDS, MIN_STEP_SECONDS
from console.kernel.money import parse_amount
from usage.facade import model_names


class LoadTestForm(forms.Form):
    model = forms.ChoiceField(label=_("Model"))
    input_tokens = forms.IntegerField(
        label=_("Input tokens"), min_value=1, max_value=32768, initial=512
    )
    output_tokens = forms.IntegerField(
        label=_("Output tokens"), min_value=1, max_value=8192, initial=128
    )
    prefix_share = forms.IntegerField(
        label=_("Shared prefix (%)"),
        min_value=0,
        max_value=100,
        initial=50,
        help_text=_(
            "The share of the prompt every call has in common (what a prompt cache reuses)."
        ),
    )
    steps = forms.CharField(
        label=_("Steps (concurrent clients)"),
        initial=", ".join(str(s) for s in DEFAULT_STEPS),
        help_text=_("Comma-separated, run in order."),
    )
    step_seconds = forms.IntegerField(
        label=_("Seconds per step"),
        min_value=MIN_STEP_SECONDS,
        max_value=MAX_STEP_SECONDS,
        initial=30,
    )
    budget = forms.DecimalField(
        label=_("Budget"),
        min_value=0,
        max_digits=14,
        decimal_places=6,
        help_text=_("The test's key stops at this spend, billed or not."),
    )
    billing = forms.ChoiceField(
        label=_("Billing"),
        choices=Billing.choices,
        initial=Billing.BILLED,
        required=False,  # not given: billed, as before the choice existed
        widget=forms.RadioSelect,
        help_text=_(
            "Billed: the test's calls are billed like any other. Test: they are recorded and "
            "their cost reported, but they are on no invoice and paid from no prepaid balance."
        ),
    )

    # Platform staff only: a select of nodes (see __init__); for everyone else a
    # hidden field, so a value sent anyway reaches the service, which refuses it.
    node = forms.IntegerField(required=False, widget=forms.HiddenInput)

    def __init__(self, *args, currency: str = "", nodes=None, **kwargs):
        """``nodes``: the nodes platform staff may pin the test to (None: not staff)."""
        super().__init__(*args, **kwargs)
        if nodes is not None:
            self.fields["node"] = forms.TypedChoiceField(
                label=_("Node (platform staff)"),
                required=False,
                coerce=int,
                empty_value=None,
                choices=[("", _("Any node (normal routing)"))]
                + [(n.pk, f"#{n.pk} {n.name}") for n in nodes],
                help_text=_(
                    "Drive this node alone: the test's key is pinned to it, with no other "
                    "node and no fallback model."
                ),
            )
        if currency:
            self.fields["budget"].label = _("Budget (%(currency)s)") % {"currency": currency}
        names = model_names(enabled=True, kind="chat")
        self.fields["model"].choices = [(n, n) for n in names]

    def clean_steps(self) -> list[int]:
        parts = [p.strip() for p in self.cleaned_data["steps"].replace(";", ",").split(",")]
        try:
            steps = [int(p) for p in parts if p]
        except ValueError:
            raise forms.ValidationError(_("Give whole numbers separated by commas.")) from None
        if not steps:
            raise forms.ValidationError(_("Give at least one step."))
        return steps

    def clean_billing(self) -> str:
        return self.cleaned_data.get("billing") or Billing.BILLED

    def clean_budget(self) -> int:
        micro = parse_amount(self.cleaned_data["budget"])
        if micro <= 0:
            raise forms.ValidationError(_("Give the test a budget above zero."))
        return micro

    @property
    def max_duration(self) -> int:
        return settings.CAPACITY_MAX_DURATION_SECONDS
