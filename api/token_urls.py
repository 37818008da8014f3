"""The API tokens' pages, in the account's part of the site (/<language>/account/tokens/)."""

from django.urls import path

from api import tokens

app_name = "tokens"

urlpatterns = [
    path("", tokens.tokens, name="index"),
    path("<int:token_id>/revoke/", tokens.revoke_token, name="revoke"),
]
