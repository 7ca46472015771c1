"""API tokens (DRF authtoken): one per user, created on demand, rotated on request."""

from __future__ import annotations

import logging

from django.contrib.auth.models import User
from django.db import transaction
from rest_framework.authtoken.models import Token

logger = logging.getLogger(__name__)


def api_token_get_or_create(*, user: User) -> Token:
    """The user's token, created if the user has none."""
    token, created = Token.objects.get_or_create(user=user)
    if created:
        logger.info("api_token.created", extra={"user_id": user.pk})
    return token


@transaction.atomic
def api_token_rotate(*, user: User) -> Token:
    """Replace the user's token: the old key stops working at once."""
    Token.objects.filter(user=user).delete()
    token = Token.objects.create(user=user)
    logger.info("api_token.rotated", extra={"user_id": user.pk})
    return token
