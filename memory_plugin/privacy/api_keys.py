"""API keys, tokens and credentials: provider prefixes, AWS secret keys, and random tokens after a word naming
one."""

from __future__ import annotations

import math
import re
import string
from collections import Counter

from .scan import _byte_class, _has_run, _placeholder, _sub_at_triggers, _trigger

# --- API keys and tokens ------------------------------------------------------------------------------------
# Checked first: keys are long alphanumeric runs that could otherwise be half-eaten by the number rules.
# Each with the literals one of which it must contain: a literal search costs ~0.02 ms on 20,000 characters, a
# regex scan ~0.3 ms, so a pattern runs only on text holding its prefix.
_API_KEY_PATTERNS: tuple[tuple[tuple[str, ...], re.Pattern[str]], ...] = (
    # OpenAI ("sk-", "sk-proj-", "sk-svcacct-") and Anthropic ("sk-ant-") secret keys; `\b` keeps "task-..." out.
    (("sk-",), re.compile(r"\bsk-[A-Za-z0-9_-]{20,}+")),
    # Stripe secret and restricted keys (live and test) and webhook signing secrets.
    (("sk_live_", "sk_test_", "rk_live_", "rk_test_"), re.compile(r"\b(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{10,}+")),
    (("whsec_",), re.compile(r"\bwhsec_[A-Za-z0-9]{20,}+")),
    # Google API keys: "AIza" and 35 URL-safe characters.
    (("AIza",), re.compile(r"\bAIza[0-9A-Za-z_-]{35}(?![0-9A-Za-z_-])")),
    # AWS access key ids (long-term AKIA, temporary ASIA): fixed prefix + 16 upper-case alphanumerics.
    (("AKIA", "ASIA"), re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b")),
    # GitHub tokens: classic/OAuth/app prefixes and fine-grained personal access tokens.
    (("ghp_", "gho_", "ghu_", "ghs_", "ghr_"), re.compile(r"\bgh[pousr]_[A-Za-z0-9]{20,}+")),
    (("github_pat_",), re.compile(r"\bgithub_pat_[A-Za-z0-9_]{20,}+")),
    # Slack bot/user/app tokens.
    (("xoxb-", "xoxp-", "xoxa-", "xoxr-", "xoxs-"), re.compile(r"\bxox[bpars]-[A-Za-z0-9-]{10,}+")),
    # JWTs (Supabase anon/service-role keys are JWTs): base64url JSON header and payload both start "eyJ".
    (("eyJ",), re.compile(r"\beyJ[A-Za-z0-9_-]{5,}+\.eyJ[A-Za-z0-9_-]{5,}+\.[A-Za-z0-9_-]{10,}+")),
    # Supabase's newer opaque keys.
    (("sb_secret_", "sb_publishable_"), re.compile(r"\bsb_(?:secret|publishable)_[A-Za-z0-9_-]{20,}+")),
)

# More providers' formats, gated the same way.
_MORE_KEY_PATTERNS: tuple[tuple[tuple[str, ...], re.Pattern[str]], ...] = (
    # Stripe publishable keys: not secret by design, but they name the account; kept out of memory too.
    (("pk_live_", "pk_test_"), re.compile(r"\bpk_(?:live|test)_[A-Za-z0-9]{10,}+")),
    # GitLab personal, deploy, runner, trigger, CI-job and OAuth tokens.
    (
        ("glpat-", "gldt-", "glrt-", "glptt-", "glcbt-", "gloas-"),
        re.compile(r"\bgl(?:pat|dt|rt|ptt|cbt|oas)-[A-Za-z0-9_-]{20,}+"),
    ),
    # Slack incoming-webhook URLs (the path is the secret).
    (("hooks.slack.com",), re.compile(r"hooks\.slack\.com/(?:services|workflows|triggers)/[A-Za-z0-9/_-]{20,}+")),
    # SendGrid, npm, PyPI, Hugging Face, Google OAuth access tokens.
    (("SG.",), re.compile(r"\bSG\.[A-Za-z0-9_-]{16,}+\.[A-Za-z0-9_-]{16,}+")),
    (("npm_",), re.compile(r"\bnpm_[A-Za-z0-9]{36}\b")),
    (("pypi-",), re.compile(r"\bpypi-AgE[A-Za-z0-9_-]{50,}+")),
    (("hf_",), re.compile(r"\bhf_[A-Za-z0-9]{30,}+")),
    (("ya29.",), re.compile(r"\bya29\.[A-Za-z0-9_-]{20,}+")),
    # Azure storage / service-bus connection strings and SAS signatures.
    (
        ("AccountKey=", "SharedAccessKey=", "sig="),
        re.compile(r"(?:AccountKey|SharedAccessKey|\bsig)=[A-Za-z0-9+/%=]{20,}+"),
    ),
    # HTTP bearer tokens as pasted from a request.
    (("Bearer", "bearer", "BEARER"), re.compile(r"\b[Bb](?:earer|EARER)\s++[A-Za-z0-9._~+/-]{20,}+=*+")),
    # Twilio API key secrets, Shopify, DigitalOcean, Databricks, Square, Telegram bot tokens.
    (("SK",), re.compile(r"\bSK[0-9a-f]{32}\b")),
    (("shpat_", "shpca_", "shppa_", "shpss_"), re.compile(r"\bshp(?:at|ca|pa|ss)_[a-fA-F0-9]{32}\b")),
    (("dop_v1_", "doo_v1_", "dor_v1_"), re.compile(r"\bdo[por]_v1_[a-f0-9]{64}\b")),
    (("dapi",), re.compile(r"\bdapi[a-f0-9]{32}(?:-\d)?\b")),
    (("sq0atp-", "sq0csp-"), re.compile(r"\bsq0(?:atp|csp)-[A-Za-z0-9_-]{22,}+")),
    ((":AA",), re.compile(r"\b\d{8,10}:AA[A-Za-z0-9_-]{30,}+")),
    # PEM / OpenSSH / PGP private keys, whole block (also with escaped "\\n" inside JSON), at most 16,000
    # characters: an unterminated header takes the rest of that stretch.
    (
        ("PRIVATE KEY",),
        re.compile(
            r"-----BEGIN[A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----"
            r"(?:[^-]|-(?!----END)){0,16000}+(?:-----END[A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----)?"
        ),
    ),
    # A Google service-account file's key id.
    (("private_key_id",), re.compile(r"(?:(?<=\"private_key_id\": \")|(?<=\"private_key_id\":\"))[a-f0-9]{40}")),
    # Authenticator (TOTP) seeds: base32 after a word saying what they are.
    (
        ("totp", "TOTP", "2fa", "2FA", "otp", "OTP", "mfa", "MFA"),
        re.compile(
            r"(?i:\b(?:totp|otp|2fa|mfa|authenticator)\s++(?:secret|seed|key|code|clave|semilla)\s*+(?:[:=]|is|es)?\s*+)"
            r"[A-Z2-7]{16,}+=*+"
        ),
    ),
)

# Discord bot tokens: base64 user id, a dot, a timestamp, a dot, an HMAC. No literal prefix: gated by a run of
# 24 base64url characters (checked in C) and held to the shape.
_DISCORD = re.compile(
    r"[MNO](?<![A-Za-z0-9_-][MNO])[A-Za-z0-9_-]{23,25}\.[A-Za-z0-9_-]{6}\.[A-Za-z0-9_-]{27,38}(?![A-Za-z0-9_-])"
)
_BASE64URL_BYTES = _byte_class(string.ascii_letters + string.digits + "_-", non_ascii=False)

# Each pattern with the character all its literals hold ("" when they share none): text without "_", "-", "."
# or "=" skips the literal searches of the patterns needing it.
_GATE_CHARS = "_-.="
_API_KEY_GATES = tuple(
    (next((c for c in _GATE_CHARS if all(c in literal for literal in literals)), ""), literals, pattern)
    for literals, pattern in (*_API_KEY_PATTERNS, *_MORE_KEY_PATTERNS)
)

# AWS secret access keys: exactly 40 base64 characters. Checked for randomness and for upper case, lower case
# and a digit together, so a git SHA-1 (40 lower-case hex digits) or a long word is not taken for one.
_AWS_SECRET = re.compile(r"(?<![A-Za-z0-9/+=])[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+=])")

# A long token right after a word naming a credential ("api key", "token", "secret", "clave api"). The value
# must also look random (see `_looks_random`), so "the key is to keep tolerances tight" stays intact.
_KEYWORD_TOKEN = re.compile(
    r"(?<![A-Za-z0-9])(?:api[\s_-]?key|access[\s_-]?key|secret(?:[\s_-]?(?:access[\s_-]?)?key)?|token|key"
    r"|clave(?:\s+(?:de\s+(?:la\s+)?)?api)?|api)\b"
    r"\s*+(?:[:=]\s*|(?:is|es|was|era)\s+)?[\"'`]?"
    r"(?P<secret>[A-Za-z0-9_\-+/=.]{24,}+)",
    re.IGNORECASE,
)


def _looks_random(token: str) -> bool:
    """True for machine-generated tokens: several character classes and high Shannon entropy (bits/char)."""
    classes = sum(
        (
            any(c.islower() for c in token),
            any(c.isupper() for c in token),
            any(c.isdigit() for c in token),
        )
    )
    if classes < 2:
        return False
    counts = Counter(token)
    entropy = -sum(n / len(token) * math.log2(n / len(token)) for n in counts.values())
    # Random base62 strings of 24+ chars score above 4; English words and repeated characters stay well below.
    return entropy >= 3.5


_BASE64_BYTES = _byte_class(string.ascii_letters + string.digits + "/+", non_ascii=False)

_API_TRIGGER = _trigger(("api", "access", "secret", "token", "key", "clave"))


def _redact_api_keys(text: str) -> tuple[str, bool]:
    found = False
    # Most key prefixes hold "_" or "-": text without one skips their literal searches (~0.01 ms each).
    present = {char: char in text for char in _GATE_CHARS}
    for required, literals, pattern in _API_KEY_GATES:
        if required and not present[required]:
            continue
        if any(literal in text for literal in literals):
            text, count = pattern.subn(_placeholder("api_key"), text)
            found = found or count > 0

    def aws_secret(match: re.Match[str]) -> str:
        nonlocal found
        token = match.group(0)
        mixed = any(c.isupper() for c in token) and any(c.islower() for c in token) and any(c.isdigit() for c in token)
        if not mixed or not _looks_random(token):
            return token
        found = True
        return _placeholder("api_key")

    def keyword_token(match: re.Match[str]) -> str:
        nonlocal found
        secret = match.group("secret")
        if not _looks_random(secret):
            return match.group(0)
        found = True
        return match.group(0)[: match.start("secret") - match.start()] + _placeholder("api_key")

    if _has_run(text, _BASE64URL_BYTES, 24):
        text, count = _DISCORD.subn(_placeholder("api_key"), text)
        found = found or count > 0
    if _has_run(text, _BASE64_BYTES, 40):
        text = _AWS_SECRET.sub(aws_secret, text)
    text = _sub_at_triggers(text, _API_TRIGGER, _KEYWORD_TOKEN, keyword_token)
    return text, found
