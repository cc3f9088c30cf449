"""The credential detector (issue 22): every generated token of each documented format is caught,
and nothing that is not a credential is changed.

Positives are generated from each provider's documented format (prefix, alphabet, length) and
placed inside ordinary text; the property is that the token is gone from the redacted text and
counted under its kind. Negatives: generated identifiers (hex digests, UUIDs, base64 blobs
without a credential context, ticket and build ids, URLs without a password), prose that
mentions passwords, and every text of the LoCoMo and JSQuAD bench data (read in place from
../shared/bench-data, skipped when absent): the false-positive count must be 0.
"""

from __future__ import annotations

import base64
import json
import string

import pytest
from cpersona.credentials.detect import find, redact, redact_json, redact_json_text
from hypothesis import example, given
from hypothesis import strategies as st

from benches.quality import datasets

ALNUM = string.ascii_letters + string.digits
B64URL = ALNUM + "_-"
B64 = ALNUM + "+/"
HEX = "0123456789abcdef"
AWS_ID = string.ascii_uppercase + "234567"


def chars(alphabet: str, low: int, high: int | None = None) -> st.SearchStrategy[str]:
    return st.text(alphabet, min_size=low, max_size=low if high is None else high)


def b64url(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def joined(*parts: st.SearchStrategy[str] | str) -> st.SearchStrategy[str]:
    return st.tuples(*(st.just(p) if isinstance(p, str) else p for p in parts)).map("".join)


def _jwt(header: dict[str, str], claims: dict[str, int], signature: str) -> str:
    return ".".join(
        [b64url(json.dumps(header).encode()), b64url(json.dumps(claims).encode()), signature]
    )


def _pem(label: str, body: bytes) -> str:
    text = base64.b64encode(body).decode()
    lines = [text[i : i + 64] for i in range(0, len(text), 64)]
    return "\n".join([f"-----BEGIN {label}-----", *lines, f"-----END {label}-----"])


#: kind -> tokens of its documented format.
FORMATS: dict[str, st.SearchStrategy[str]] = {
    "private_key": st.builds(
        _pem,
        st.sampled_from(
            [
                "PRIVATE KEY",
                "RSA PRIVATE KEY",
                "EC PRIVATE KEY",
                "DSA PRIVATE KEY",
                "OPENSSH PRIVATE KEY",
                "ENCRYPTED PRIVATE KEY",
                "PGP PRIVATE KEY BLOCK",
            ]
        ),
        st.binary(min_size=32, max_size=600),
    ),
    "aws_access_key_id": joined(st.sampled_from(["AKIA", "ASIA"]), chars(AWS_ID, 16)),
    "gcp_api_key": joined("AIza", chars(B64URL, 35)),
    "github_token": joined(
        st.sampled_from(["ghp_", "gho_", "ghu_", "ghs_", "ghr_"]), chars(ALNUM, 36)
    )
    | joined("github_pat_", chars(ALNUM, 22), "_", chars(ALNUM, 59)),
    "gitlab_token": joined(st.sampled_from(["glpat-", "gldt-", "glrt-"]), chars(B64URL, 20, 40)),
    "slack_token": joined(
        st.sampled_from(["xoxb-", "xoxp-", "xoxa-", "xoxr-", "xoxs-"]),
        chars(string.digits, 10, 13),
        "-",
        chars(string.digits, 10, 13),
        "-",
        chars(ALNUM, 24, 32),
    ),
    "slack_webhook": joined(
        "https://hooks.slack.com/services/T",
        chars(string.ascii_uppercase + string.digits, 8, 10),
        "/B",
        chars(string.ascii_uppercase + string.digits, 8, 10),
        "/",
        chars(ALNUM, 24),
    ),
    "discord_token": joined(
        st.integers(10**16, 10**19 - 1).map(lambda n: b64url(str(n).encode())),
        ".",
        chars(B64URL, 6),
        ".",
        chars(B64URL, 27, 38),
    ),
    "discord_webhook": joined(
        "https://discord.com/api/webhooks/",
        chars(string.digits, 17, 19),
        "/",
        chars(B64URL, 60, 68),
    ),
    "telegram_token": joined(chars(string.digits, 8, 10), ":AA", chars(B64URL, 33)),
    "stripe_key": joined(
        st.sampled_from(["sk_live_", "rk_live_", "sk_test_", "rk_test_"]), chars(ALNUM, 24, 99)
    ),
    "openai_key": joined(
        st.sampled_from(["sk-proj-", "sk-svcacct-", "sk-admin-"]), chars(B64URL, 40, 160)
    )
    | joined("sk-", chars(ALNUM, 48)),
    "anthropic_key": joined(
        st.sampled_from(["sk-ant-api03-", "sk-ant-admin01-"]), chars(B64URL, 93), "AA"
    ),
    "huggingface_token": joined("hf_", chars(string.ascii_letters, 34)),
    "npm_token": joined("npm_", chars(ALNUM, 36)),
    "pypi_token": joined("pypi-AgEIcHlwaS5vcmc", chars(B64URL, 50, 180)),
    "sendgrid_key": joined("SG.", chars(B64URL, 22), ".", chars(B64URL, 43)),
    "twilio_api_key": joined("SK", chars(HEX, 32)),
    "jwt": st.builds(
        _jwt,
        st.fixed_dictionaries(
            {"alg": st.sampled_from(["HS256", "RS256", "ES256", "EdDSA"]), "typ": st.just("JWT")}
        ),
        st.dictionaries(st.sampled_from(["sub", "iat", "exp", "nbf"]), st.integers(0, 2**40)),
        chars(B64URL, 43, 86),
    ),
}

#: Where a token may sit: alone, in a sentence, quoted, in a line of shell, after a URL.
CONTEXTS = st.sampled_from(
    [
        "{}",
        "here is the key: {} (do not share)",
        'config = {{"value": "{}"}}',
        "curl -H 'X-Thing: {}' https://api.example.com/v1",
        "line one\n{}\nline three",
        "({})",
    ]
)


@pytest.mark.parametrize("kind", sorted(FORMATS))
@given(data=st.data())
def test_detect_catches_every_generated_token_of_each_format(
    kind: str, data: st.DataObject
) -> None:
    token = data.draw(FORMATS[kind], label="token")
    text = data.draw(CONTEXTS, label="context").format(token)
    out, counts = redact(text)
    assert token not in out
    assert counts.get(kind, 0) >= 1, (kind, counts)
    assert f"[REDACTED:{kind}]" in out


# -- values assigned to credential names -------------------------------------------------------

NAMES = {
    "password": ["password", "passwd", "DB_PASSWORD", "adminPassword", "smtp.password"],
    "secret": ["secret", "client_secret", "clientSecret", "APP_SECRET", "jwt-secret"],
    "token": ["token", "access_token", "GITHUB_TOKEN", "refreshToken", "auth-token"],
    "api_key": ["api_key", "apikey", "apiKey", "X-API-Key", "OPENAI_API_KEY"],
    "access_key": ["access_key", "accessKey", "MINIO_ACCESS_KEY", "AccountKey", "SharedAccessKey"],
}
FORMS = [
    "{n}={v}",
    "{n} = {v}",
    "export {n}={v}",
    '{n}="{v}"',
    "{n}: '{v}'",
    '"{n}": "{v}"',
    "{n} := {v}",
    "{n}: {v}",
]
#: Generated values hold a letter and a digit (a plain word after `name:` is prose) and none
#: of the words a name is made of (`token=token1` reads as a reference to a variable).
VALUES = (
    st.tuples(
        chars(string.ascii_letters, 1, 8),
        chars(string.digits, 1, 4),
        chars(ALNUM + "!@#%^&*+/=~", 0, 24),
    )
    .map("".join)
    .filter(lambda v: not any(w in v.lower() for w in ("pass", "secret", "token", "key")))
)


@given(
    kind=st.sampled_from(sorted(NAMES)),
    data=st.data(),
    value=VALUES,
    form=st.sampled_from(FORMS),
)
@example(kind="password", data=None, value="hunter2", form="{n}: {v}")
def test_detect_catches_values_assigned_to_credential_names(
    kind: str, data: st.DataObject | None, value: str, form: str
) -> None:
    name = NAMES[kind][0] if data is None else data.draw(st.sampled_from(NAMES[kind]))
    text = "settings:\n" + form.format(n=name, v=value) + "\nend"
    out, counts = redact(text)
    assert value not in out
    assert counts == {kind: 1}
    assert name in out  # the name stays: a reader still sees what was there


def test_detect_aws_secret_key_is_caught_beside_its_key_id_and_by_name() -> None:
    secret = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
    out, counts = redact(f"id AKIAIOSFODNN7EXAMPLE secret {secret}")
    assert secret not in out and counts == {"aws_access_key_id": 1, "aws_secret_key": 1}
    out, counts = redact(f"aws_secret_access_key = {secret}")
    assert out == "aws_secret_access_key = [REDACTED:aws_secret_key]"
    # Without an access key id or a name, a 40-character base64 string is not one.
    assert redact(f"blob {secret} end") == (f"blob {secret} end", {})


@given(
    scheme=st.sampled_from(["postgres", "postgresql", "mysql", "mongodb+srv", "redis", "https"]),
    user=chars(ALNUM + "._-", 0, 12),
    password=chars(ALNUM + "!$&*+,;=~%", 1, 30).filter(lambda p: not p.startswith("$")),
)
def test_detect_catches_url_passwords_and_keeps_the_rest_of_the_url(
    scheme: str, user: str, password: str
) -> None:
    url = f"{scheme}://{user}:{password}@db.example.com:5432/app"
    out, counts = redact(f"connect with {url} please")
    assert (
        out
        == f"connect with {scheme}://{user}:[REDACTED:url_password]@db.example.com:5432/app please"
    )
    assert counts == {"url_password": 1}


def test_detect_connection_strings() -> None:
    azure = (
        "DefaultEndpointsProtocol=https;AccountName=acme;AccountKey=q8Zr+Vx3/Lm==;EndpointSuffix=x"
    )
    assert redact(azure) == (
        "DefaultEndpointsProtocol=https;AccountName=acme;AccountKey=[REDACTED:access_key];"
        "EndpointSuffix=x",
        {"access_key": 1},
    )
    odbc = "Server=db;Database=app;User Id=sa;Password=Pa55word!;"
    assert redact(odbc)[0] == "Server=db;Database=app;User Id=sa;Password=[REDACTED:password];"


def test_detect_reads_the_japanese_name_and_separators() -> None:
    assert redact("サーバーのパスワード：hunter22 です") == (
        "サーバーのパスワード：[REDACTED:password] です",
        {"password": 1},
    )
    assert redact("パスワード=s3cret!")[0] == "パスワード=[REDACTED:password]"
    assert find("パスワードを忘れた。パスワード：忘れた") == []


def test_detect_headers_flags_and_truncated_keys() -> None:
    out, _ = redact("curl -H 'Authorization: Bearer abcdef0123456789abcdef0123' https://x")
    assert out == "curl -H 'Authorization: Bearer [REDACTED:authorization]' https://x"
    assert redact("mysql --password hunter22 -u root")[0] == (
        "mysql --password [REDACTED:password] -u root"
    )
    cut = "-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA7bq98Jd23jdkJDKJDkjdkjd\n\nthanks"
    assert redact(cut)[0] == "[REDACTED:private_key]\n\nthanks"
    # A key pasted as JSON text (`\n` escapes), as in a cloud service-account file.
    block = "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADAN\n-----END PRIVATE KEY-----\n"
    escaped = json.dumps({"private_key": block})
    out, counts = redact(escaped)
    assert "MIIEvQIBADAN" not in out and counts == {"private_key": 1}
    assert json.loads(out) == {"private_key": "[REDACTED:private_key]\n"}


@given(st.sampled_from(sorted(FORMATS)).flatmap(lambda k: FORMATS[k]), st.sampled_from(FORMS))
def test_redact_is_idempotent(token: str, form: str) -> None:
    once, _ = redact(form.format(n="api_key", v=token) + " and " + token)
    assert redact(once) == (once, {})


def test_redact_json_redacts_strings_and_values_under_credential_names() -> None:
    value = {
        "password": "hunter",
        "nested": [{"token": "abc"}, "ghp_" + "b" * 36],
        "max_tokens": "5",
        "n": 3,
        "token_count": "12",
        "note": "nothing here",
    }
    out, counts = redact_json(value)
    assert out == {
        "password": "[REDACTED:password]",
        "nested": [{"token": "[REDACTED:token]"}, "[REDACTED:github_token]"],
        "max_tokens": "5",
        "n": 3,
        "token_count": "12",
        "note": "nothing here",
    }
    assert counts == {"password": 1, "token": 1, "github_token": 1}
    assert redact_json({"password": None, "token": "", "api_key": "${API_KEY}"}) == (
        {"password": None, "token": "", "api_key": "${API_KEY}"},
        {},
    )


JSON_LEAVES = st.one_of(
    st.sampled_from(sorted(FORMATS)).flatmap(lambda k: FORMATS[k]),
    VALUES,
    st.text(max_size=20),
    st.integers(),
    st.none(),
)
JSON_KEYS = st.sampled_from(["password", "api_key", "note", "max_tokens", "db password", "id"])
JSON_VALUES = st.recursive(
    JSON_LEAVES,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(JSON_KEYS, inner, max_size=3),
    max_leaves=8,
)


@given(st.dictionaries(JSON_KEYS, JSON_VALUES, max_size=4))
def test_redact_json_text_answers_as_the_json_walk(value: dict[str, object]) -> None:
    """The stored-metadata fast path (skip the parse when the text rules find nothing) against
    its oracle, the walk over the parsed value."""
    text = json.dumps(value)
    walked, counts = redact_json(value)
    assert redact_json_text(text) == ((json.dumps(walked) if counts else text), counts)


# -- what is never touched --------------------------------------------------------------------

PROSE = [
    "I forgot my password again",
    "Password: forgotten. Reset it in the portal.",
    "Top secret: the plan is to ship on Friday",
    "The meeting token is a coin; pass the keys to me",
    "my password is long and I keep it in a password manager",
    "rotate the API key every 90 days; the secret sauce is patience",
    "token: 12",
    "secret = secrets.token_hex(16)",
    "client = Client(token=token, api_key=settings.api_key)",
    "password=${DB_PASSWORD} and token: $GITHUB_TOKEN and api_key: <your key>",
    'the "password" field is required; token = null; secret: ****',
    "max_tokens = 4096, num_tokens: 12, tokenizer = bert, passkey support",
    "Bearer of bad news: the build broke",
    "we rotated credentials and confirmed the CVE-2024-3094 remediation",
]
IDENTIFIERS = [
    "commit 3f786850e387550fdab836ed7e6dc881de23001b fixed it",
    "uuid 123e4567-e89b-12d3-a456-426614174000",
    "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
    "CVE-2024-3094, JIRA-1234, build #5678, PROJ-42, run 1234567890, v1.2.3-rc.1",
    "see https://example.com/a?b=c#d and git@github.com:org/repo.git and mailto:a@b.org",
    "ssh://git@host.example.com/repo and https://alice@example.com/path",
    "-----BEGIN PUBLIC KEY-----\nMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE\n-----END PUBLIC KEY-----",
    "-----BEGIN CERTIFICATE-----\nMIIBszCCAVmgAwIBAgIUYz\n-----END CERTIFICATE-----",
    "the module my_package.sub_module.ClassNameIsLongHere.method is slow",
    "AIDAJQABLZS4A3QDU576Q is an IAM user id; arn:aws:iam::123456789012:user/alice",
    "build 2024.11.05-1234 on node-17.internal; image sha 4b825dc642cb6eb9a060e54bf8d69288fbee4904",
]


@pytest.mark.parametrize("text", PROSE + IDENTIFIERS)
def test_detect_leaves_prose_and_identifiers_alone(text: str) -> None:
    assert find(text) == []


IDENTIFIER_STRATEGIES = {
    "hex digest": st.binary(min_size=16, max_size=64).map(bytes.hex)
    | st.binary(min_size=16, max_size=64).map(lambda b: b.hex().upper()),
    "uuid": st.uuids().map(str)
    | st.uuids().map(lambda u: str(u).upper())
    | st.uuids().map(lambda u: u.hex),
    "base64 blob": st.binary(min_size=1, max_size=300).map(lambda b: base64.b64encode(b).decode())
    | st.binary(min_size=1, max_size=300).map(b64url),
    "ticket or build id": st.from_regex(r"\A[A-Z]{2,6}-[0-9]{1,6}\Z")
    | st.from_regex(r"\Abuild #[0-9]{1,9}\Z")
    | st.from_regex(r"\Av[0-9]{1,2}\.[0-9]{1,3}\.[0-9]{1,3}(-rc\.[0-9])?\Z"),
    "url without credentials": joined(
        st.sampled_from(["https://", "http://", "ssh://git@", "https://alice@"]),
        chars(string.ascii_lowercase, 1, 12),
        ".example.com/",
        chars(ALNUM + "/-_.", 0, 40),
        st.sampled_from(["", "?q=1&page=2", "#top", ":8443"]),
    ),
}


@pytest.mark.parametrize("what", sorted(IDENTIFIER_STRATEGIES))
@given(data=st.data())
def test_detect_never_changes_generated_identifiers(what: str, data: st.DataObject) -> None:
    ident = data.draw(IDENTIFIER_STRATEGIES[what], label=what)
    text = data.draw(st.sampled_from(["{}", "see {} for details", "id={}", "ref: {}"])).format(
        ident
    )
    assert redact(text) == (text, {})


def bench_texts(name: str) -> list[str]:
    try:
        corpus = datasets.locomo() if name == "locomo" else datasets.jsquad()
    except FileNotFoundError:
        pytest.skip(f"no {name} data in {datasets.data_dir()} (it is never copied into the repo)")
    texts = [d.content for d in corpus.docs] + [e.summary for e in corpus.episodes]
    return texts + [q.text for q in corpus.queries]


@pytest.mark.parametrize("name", ["locomo", "jsquad"])
def test_detect_changes_no_bench_data_text(name: str) -> None:
    texts = bench_texts(name)
    assert len(texts) > 1000
    false_positives = [(t[:80], redact(t)[1]) for t in texts if find(t)]
    assert false_positives == [], f"{len(false_positives)} of {len(texts)} texts changed"
