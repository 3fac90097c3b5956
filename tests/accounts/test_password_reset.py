"""Password reset by e-mail: Django's views and tokens, a link that works
once, an answer that never says whether an account exists, and throttles
per address typed and per client address."""

from __future__ import annotations

import re

import pytest
from django.core import mail
from django.urls import reverse
from django.utils.encoding import force_bytes
from django.utils.http import urlsafe_base64_encode

from accounts.models import User

pytestmark = pytest.mark.django_db

RESET = "/password/reset/"


@pytest.fixture
def user(db):
    return User.objects.create_user("ada@example.com", "old-password-for-ada-1")


def _link(message) -> str:
    return re.search(r"https?://[^/]+(/\S+)", message.body).group(1)


def test_a_reset_link_sets_a_new_password_once(client, user):
    # Given a reset asked for by e-mail address...
    login_page = client.get(reverse("accounts:login")).content.decode()
    assert f'href="{reverse("accounts:password_reset")}"' in login_page
    response = client.post(reverse("accounts:password_reset"), {"email": "ADA@example.com"})
    assert response.status_code == 302
    assert response["Location"] == reverse("accounts:password_reset_done")
    assert len(mail.outbox) == 1
    message = mail.outbox[0]
    assert message.to == ["ada@example.com"]
    assert message.subject == "Reset your Token Console password"
    link = _link(message)

    # ...the link leads to a form that sets the new password...
    form_page = client.get(link, follow=True)
    assert "Set a new password" in form_page.content.decode()
    set_url = form_page.redirect_chain[-1][0]
    done = client.post(
        set_url,
        {"new_password1": "a-brand-new-passphrase-7", "new_password2": "a-brand-new-passphrase-7"},
    )
    assert done["Location"] == reverse("accounts:password_reset_complete")
    user.refresh_from_db()
    assert user.check_password("a-brand-new-passphrase-7")

    # ...and the same link no longer works.
    client.logout()
    again = client.get(link, follow=True).content.decode()
    assert "This link no longer works" in again
    assert "password-set-form" not in again


def test_the_answer_is_the_same_for_an_unknown_address(client, user):
    known = client.post(reverse("accounts:password_reset"), {"email": "ada@example.com"})
    unknown = client.post(reverse("accounts:password_reset"), {"email": "nobody@example.com"})
    assert (known.status_code, known["Location"]) == (unknown.status_code, unknown["Location"])
    assert [m.to for m in mail.outbox] == [["ada@example.com"]]
    page = client.get(known["Location"]).content.decode()
    assert "If an account uses that address" in page


def test_resets_are_throttled_per_address_without_saying_so(client, user, settings):
    settings.PASSWORD_RESET_PER_ACCOUNT = 2
    answers = [
        client.post(reverse("accounts:password_reset"), {"email": "ada@example.com"})
        for _ in range(4)
    ]
    assert {(a.status_code, a["Location"]) for a in answers} == {
        (302, reverse("accounts:password_reset_done"))
    }
    assert len(mail.outbox) == 2


def test_resets_are_throttled_per_client_address(client, user, settings):
    settings.PASSWORD_RESET_PER_CLIENT = 3
    for i in range(3):
        client.post(reverse("accounts:password_reset"), {"email": f"someone{i}@example.com"})
    refused = client.post(reverse("accounts:password_reset"), {"email": "ada@example.com"})
    assert refused.status_code == 429
    assert int(refused["Retry-After"]) > 0
    assert "Too many reset requests" in refused.content.decode()
    assert mail.outbox == []


def test_a_forged_or_stale_token_is_refused(client, user):
    client.post(reverse("accounts:password_reset"), {"email": "ada@example.com"})
    link = _link(mail.outbox[0])
    forged = re.sub(r"/([^/]+)/$", "/abc-0123456789abcdef/", link)
    assert "This link no longer works" in client.get(forged, follow=True).content.decode()
    # Signing in (last_login moves) also spends the link.
    client.login(username="ada@example.com", password="old-password-for-ada-1")
    client.logout()
    assert "This link no longer works" in client.get(link, follow=True).content.decode()


def test_the_default_backend_writes_the_mail_to_files(settings, tmp_path, client, user):
    settings.EMAIL_BACKEND = "django.core.mail.backends.filebased.EmailBackend"
    settings.EMAIL_FILE_PATH = str(tmp_path)
    client.post(reverse("accounts:password_reset"), {"email": "ada@example.com"})
    written = "".join(p.read_text() for p in tmp_path.iterdir())
    assert "/password/reset/" in written and "ada@example.com" in written


def test_a_link_is_bound_to_its_account(client, user):
    other = User.objects.create_user("eve@example.com", "eves-password-long-1")
    client.post(reverse("accounts:password_reset"), {"email": "ada@example.com"})
    link = _link(mail.outbox[0])
    uid = link.split("/")[-3]
    other_uid = urlsafe_base64_encode(force_bytes(other.pk))
    assert uid != other_uid
    swapped = link.replace(f"/{uid}/", f"/{other_uid}/")
    assert "This link no longer works" in client.get(swapped, follow=True).content.decode()
