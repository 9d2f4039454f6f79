"""An e-mail through the lab's SMTP server, always over STARTTLS (the server's certificate is
verified: against BENCHFARM_SMTP_CA_FILE where the lab's relay has a certificate of its own CA,
else the system's), with a login where the lab gives one. The server is the lab's, from the
operator's settings (the chart's `notifications.smtp` values), never a tenant's: a Notification
names only recipients.
"""

from __future__ import annotations

import smtplib
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from email.message import EmailMessage
from email.utils import formatdate

from ..api.notifications import DELIVERY_HEADER
from . import DeliveryFailed

TIMEOUT = 20.0


@dataclass(frozen=True)
class SmtpSettings:
    host: str
    port: int = 587
    sender: str = "benchfarm@localhost"
    username: str = ""
    password: str = ""
    ca_file: str = ""

    @classmethod
    def from_environ(cls, env: Mapping[str, str]) -> SmtpSettings | None:
        """None where the lab has no SMTP server (BENCHFARM_SMTP_HOST unset)."""
        host = env.get("BENCHFARM_SMTP_HOST", "")
        if not host:
            return None
        return cls(host=host, port=int(env.get("BENCHFARM_SMTP_PORT", "") or 587),
                   sender=env.get("BENCHFARM_SMTP_FROM", "") or "benchfarm@localhost",
                   username=env.get("BENCHFARM_SMTP_USERNAME", ""),
                   password=env.get("BENCHFARM_SMTP_PASSWORD", ""),
                   ca_file=env.get("BENCHFARM_SMTP_CA_FILE", ""))


def send(settings: SmtpSettings, to: list[str], subject: str, text: str, delivery: str) -> None:
    """One attempt; DeliveryFailed says why it did not go. The Message-ID is the delivery's
    id, so a mail sent again after a lost answer is the same message to the recipient's
    mail system."""
    msg = EmailMessage()
    msg["From"] = settings.sender
    msg["To"] = ", ".join(to)
    msg["Subject"] = subject
    msg["Date"] = formatdate(usegmt=True)
    msg["Message-ID"] = f"<{delivery}@benchfarm>"
    msg[DELIVERY_HEADER] = delivery
    msg.set_content(text)
    try:
        context = ssl.create_default_context(cafile=settings.ca_file or None)
        with smtplib.SMTP(settings.host, settings.port, timeout=TIMEOUT) as smtp:
            smtp.ehlo()
            if not smtp.has_extn("starttls"):
                raise DeliveryFailed("the lab's SMTP server does not offer STARTTLS; no mail is "
                                     "sent in the clear")
            smtp.starttls(context=context)
            smtp.ehlo()
            if settings.username:
                smtp.login(settings.username, settings.password)
            smtp.send_message(msg)
    except DeliveryFailed:
        raise
    except (OSError, smtplib.SMTPException, ssl.SSLError) as exc:
        raise DeliveryFailed(f"the lab's SMTP server: {exc}") from exc
