"""``{% local_mail_note %}``: where this Parley's e-mail goes (:func:`parley.mail.local_mail_note`)."""

from django import template

from parley.mail import local_mail_note

register = template.Library()
register.simple_tag(local_mail_note)
