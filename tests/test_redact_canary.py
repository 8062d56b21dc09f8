"""Canaries: secrets made up for this run, planted in every form a node's evidence holds them, must
not reach a bundle written the way ``kpdoctor collect`` writes one, neither plain nor base64.

Each form is a line (or a few) in the artifact it would live in: a kube-proxy log in klog format
quoting a kubeconfig, a request body or HTTP headers; ``ps -efww`` output (processes.txt) with
flags and the options of programs that take a password (``mysql -pSECRET``); YAML, INI and env
configs; cluster JSON; PEM blocks, quoted in a line, and base64 of PEM. The tokens are random each
run (``secrets``), so nothing here can be special-cased. The bundle goes through the collector's
own redaction (``collect.live._redact``) and writer (``bundle.writer``, folder and .tar.gz); every
file and archive member is searched, and so is every base64-looking run in them, decoded.

The fixtures test: real kube-proxy logs, rule dumps, sysctl and conntrack listings, with secret
lines planted between their lines, come out with only the planted lines changed.
"""

from __future__ import annotations

import base64
import gzip
import json
import re
import secrets
import string
import tarfile
import textwrap
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kpdoctor.bundle.contents import Collected
from kpdoctor.bundle.writer import Bundle, write_dir, write_tar
from kpdoctor.collect import live
from kpdoctor.collect.redact import redact_secrets

DATA = Path(__file__).resolve().parent / "data"
K = "I0102 15:04:05.000000    1 file.go:12] "  # a klog line's header
PS = "root     {pid}       1  0 10:00 ?        00:00:01 "  # a `ps -efww` line up to CMD
PS_HEAD = "UID          PID    PPID  C STIME TTY          TIME CMD\n"


def token(kind: str = "url") -> str:
    """A fresh secret: URL-safe base64 (most tokens), hex, or a password with punctuation."""
    if kind == "hex":
        return secrets.token_hex(16)
    if kind == "pw":  # what a config or a shell takes unquoted: no white space, quotes, backslash, `<>`
        alphabet = string.ascii_letters + string.digits + "!#$%&()*+,-.:;=?@^_{|}~"
        return "P" + "".join(secrets.choice(alphabet) for _ in range(20))
    return secrets.token_urlsafe(18)


def pem(label: str, secret: str) -> str:
    """A PEM block whose body encodes ``secret`` (with random bytes around it)."""
    der = b"0\x82\x04\xa4" + secret.encode() + secrets.token_bytes(48)
    body = "\n".join(textwrap.wrap(base64.b64encode(der).decode(), 64))
    return f"-----BEGIN {label}-----\n{body}\n-----END {label}-----\n"


def b64(s: str) -> str:
    return base64.b64encode(s.encode()).decode()


@dataclass(frozen=True)
class Form:
    """A secret in context: ``make(secret)`` gives the artifact text (or its lines to plant)."""

    name: str
    path: str
    make: Callable[[str], str]
    kind: str = "url"
    # reported in issue 36 (the pre-fix code leaks it); the others pass before and after
    reported: bool = False


def _json(obj: object) -> str:
    return json.dumps(obj, indent=2) + "\n"


def _configmap(name: str, data: dict[str, str]) -> str:
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "kube-system"}}
    return _json({"apiVersion": "v1", "kind": "List", "items": [{**cm, "data": data}]})


def _pod(argv: list[str], probe: list[str] | None = None) -> str:
    c: dict[str, object] = {"name": "db", "image": "mysql:8", "command": argv}
    if probe:
        c["livenessProbe"] = {"exec": {"command": probe}}
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "db-0", "namespace": "shop"}, "spec": {"containers": [c]}}
    return _json({"apiVersion": "v1", "kind": "List", "items": [pod]})


KP = "kube-proxy/log.txt"
PROC = "node/processes.txt"
CONF = "kube-proxy/config.yaml"
FORMS: list[Form] = [
    # -- configs: YAML, INI, env -------------------------------------------------------------
    Form("yaml-kubeconfig", CONF, lambda s: f"users:\n- name: kp\n  user:\n    token: {s}\n"),
    Form("yaml-password-quoted", CONF, lambda s: f'users:\n- user:\n    password: "{s}"\n', "pw"),
    Form("yaml-client-key-data", CONF, lambda s: f"    client-key-data: {b64(pem('RSA PRIVATE KEY', s))}\n"),
    Form("yaml-block-scalar", CONF, lambda s: f"config:\n  token: |\n    {s}\n  mode: iptables\n"),
    Form("yaml-client-secret", CONF, lambda s: f"        client-secret: {s}\n", "pw"),
    Form("ini-spaced", "node/my.cnf", lambda s: f"[client]\nuser = root\npassword = {s}\n", "pw", reported=True),
    Form("ini-packed", "node/my.cnf", lambda s: f"[client]\npassword={s}\n", "pw"),
    Form("env-file", "node/app.env", lambda s: f"FOO_PASSWORD={s}\nLOG_LEVEL=debug\n", "hex"),
    Form("env-export", "node/profile", lambda s: f"export AWS_SECRET_ACCESS_KEY={s}\n"),
    Form("env-properties", "node/app.properties", lambda s: f"spring.datasource.password={s}\n", reported=True),
    Form("aws-ini", "node/credentials", lambda s: f"[default]\naws_secret_access_key = {s}\n", reported=True),
    # -- kube-proxy logs: a key anywhere in a klog line ---------------------------------------------
    Form("klog-client-key-data", KP, lambda s: f"{K}loaded kubeconfig: client-key-data: {s}\n", reported=True),
    Form(
        "klog-client-key-data-pem",
        KP,
        lambda s: f"{K}user: client-key-data: {b64(pem('EC PRIVATE KEY', s))} token: x\n",
        reported=True,
    ),
    Form("klog-password-colon", KP, lambda s: f'{K}config password: "{s}" user: admin\n', "pw", reported=True),
    Form("klog-token-colon", KP, lambda s: f"{K}using token: {s} for the API\n", "hex", reported=True),
    Form("klog-secret-nospace", KP, lambda s: f"{K}map[name:kp secret:{s}]\n", reported=True),
    Form("klog-key-spaced-equals", KP, lambda s: f"{K}connecting with password = {s}\n", "pw", reported=True),
    Form("klog-key-equals", KP, lambda s: f'{K}"Got token" token="{s}" user="system:kube-proxy"\n'),
    Form("klog-json", KP, lambda s: f'{K}request body {{"user":"admin","password":"{s}"}}\n', "pw"),
    Form(
        "klog-escaped-json",
        KP,
        lambda s: f'{K}"Request" body="{{\\"username\\":\\"admin\\",\\"password\\":\\"{s}\\"}}" code=401\n',
        reported=True,
    ),
    Form("klog-json-api-key", KP, lambda s: f'{K}config {{"apiKey": "{s}", "v": 2}}\n', reported=True),
    Form(
        "klog-go-struct",
        KP,
        lambda s: f"{K}rest config &{{Host:https://10.0.0.1 Username:admin Password:{s} QPS:5}}\n",
        reported=True,
    ),
    Form("klog-url-password", KP, lambda s: f"{K}connecting to https://admin:{s}@10.0.0.1:6443/api\n"),
    Form(
        "klog-pem-quoted",
        KP,
        lambda s: f'{K}"Loaded" key="{pem("PRIVATE KEY", s).replace(chr(10), chr(92) + "n")}" file="x"\n',
    ),
    Form("klog-pem-b64", KP, lambda s: f'{K}"Loaded" data="{b64(pem("RSA PRIVATE KEY", s))}"\n', reported=True),
    # -- HTTP headers, anywhere, any case --------------------------------------------------------
    Form("hdr-authorization", KP, lambda s: f"{K}headers: Authorization: Bearer {s}\n"),
    Form("hdr-basic", KP, lambda s: f"{K}    Proxy-Authorization: Basic {b64('admin:' + s)}\n"),
    Form("hdr-x-auth-token", KP, lambda s: f"{K}    X-Auth-Token: {s}\n", reported=True),
    Form("hdr-cookie", KP, lambda s: f"{K}headers: Cookie: theme=dark; session={s}; lang=en\n", reported=True),
    Form("hdr-set-cookie", KP, lambda s: f"{K}    set-cookie: sid={s}; Path=/; HttpOnly\n", reported=True),
    Form("hdr-x-api-key", KP, lambda s: f"{K}    x-api-key: {s}\n", reported=True),
    Form("hdr-private-token", KP, lambda s: f"{K}    PRIVATE-TOKEN: {s}\n", reported=True),
    Form("hdr-vault-token", KP, lambda s: f"{K}    X-Vault-Token: {s}\n", reported=True),
    Form(
        "hdr-go-map",
        KP,
        lambda s: f"{K}headers=map[Accept:[*/*] Cookie:[sid={s}] X-Auth-Token:[{s}]]\n",
        reported=True,
    ),
    Form("hdr-json", KP, lambda s: f'{K}headers {{"X-Api-Key":["{s}"],"Accept":["*/*"]}}\n', reported=True),
    # -- argv: processes.txt ------------------------------------------------------------------------
    Form("argv-flag-equals", PROC, lambda s: PS_HEAD + PS.format(pid=4001) + f"agent --password={s} --v=2\n", "pw"),
    Form("argv-flag-space", PROC, lambda s: PS_HEAD + PS.format(pid=4002) + f"agent --token {s} --v=2\n"),
    Form(
        "argv-mysql",
        PROC,
        lambda s: PS_HEAD + PS.format(pid=4003) + f"/usr/bin/mysql -uroot -p{s} -h db shop\n",
        "pw",
        reported=True,
    ),
    Form(
        "argv-mysqladmin",
        PROC,
        lambda s: PS_HEAD + PS.format(pid=4004) + f"mysqladmin -u root -p{s} status\n",
        reported=True,
    ),
    Form(
        "argv-mysqldump-quoted",
        PROC,
        lambda s: PS_HEAD + PS.format(pid=4005) + f"sh -c mysqldump -uroot -p'{s}' shop > /tmp/x\n",
        "pw",
        reported=True,
    ),
    Form("argv-sshpass", PROC, lambda s: PS_HEAD + PS.format(pid=4006) + f"sshpass -p {s} ssh a@b\n", reported=True),
    Form("argv-redis-cli", PROC, lambda s: PS_HEAD + PS.format(pid=4007) + f"redis-cli -a {s} ping\n", reported=True),
    Form("argv-ldapsearch", PROC, lambda s: PS_HEAD + PS.format(pid=4008) + f"ldapsearch -x -w {s} -b dc=x\n", reported=True),
    Form(
        "argv-curl-user",
        PROC,
        lambda s: PS_HEAD + PS.format(pid=4009) + f"curl -sS -u admin:{s} https://10.0.0.1/\n",
        reported=True,
    ),
    Form(
        "argv-curl-header",
        PROC,
        lambda s: PS_HEAD + PS.format(pid=4010) + f'curl -H "X-Api-Key: {s}" https://10.0.0.1/\n',
        reported=True,
    ),
    Form(
        "argv-openssl",
        PROC,
        lambda s: PS_HEAD + PS.format(pid=4011) + f"openssl pkcs12 -in a.p12 -passin pass:{s} -nodes\n",
        reported=True,
    ),
    Form("argv-url", PROC, lambda s: PS_HEAD + PS.format(pid=4012) + f"git clone https://bot:{s}@git.example.com/x\n"),
    Form("argv-env", PROC, lambda s: PS_HEAD + PS.format(pid=4013) + f"env DB_PASSWORD={s} ./run\n"),
    # -- PEM ------------------------------------------------------------------------------------------
    Form("pem-block", "node/key.pem", lambda s: "notes\n" + pem("RSA PRIVATE KEY", s) + "after\n"),
    Form("pem-openssh", "node/id", lambda s: pem("OPENSSH PRIVATE KEY", s)),
    Form("pem-yaml-block", CONF, lambda s: "tls.key: |\n" + textwrap.indent(pem("EC PRIVATE KEY", s), "  ")),
    Form(
        "pem-b64-wrapped",
        "node/secret.txt",
        lambda s: "data:\n" + textwrap.indent(base64.encodebytes(pem("PRIVATE KEY", s).encode()).decode(), "  ") + "end\n",
        reported=True,
    ),
    # -- cluster JSON ----------------------------------------------------------------------------------
    Form(
        "json-configmap-log",
        "cluster/configmaps.json",
        lambda s: _configmap("app", {"app.log": f"{K}loaded config token: {s} ok\n", "mode": "iptables"}),
        reported=True,
    ),
    Form(
        "json-configmap-env",
        "cluster/configmaps.json",
        lambda s: _configmap("app", {".env": f"DB_PASSWORD={s}\nexport API_KEY={s}\n"}),
    ),
    Form("json-pod-mysql-argv", "cluster/pods.json", lambda s: _pod(["mysql", "-uroot", f"-p{s}"]), "pw", reported=True),
    Form(
        "json-pod-probe",
        "cluster/pods.json",
        lambda s: _pod(["mysqld"], ["redis-cli", "-a", s, "ping"]),
        reported=True,
    ),
    Form(
        "json-pod-header-annotation",
        "cluster/pods.json",
        lambda s: _pod(["sh", "-c", f"curl -H 'X-Auth-Token: {s}' http://x"]),
        reported=True,
    ),
]


# --------------------------------------------------------------------------------------------
# Searching a bundle
# --------------------------------------------------------------------------------------------

_RUN = re.compile(rb"[A-Za-z0-9+/_-]{12,}={0,2}")
_URLSAFE = bytes.maketrans(b"-_", b"+/")


def _decodings(blob: bytes, depth: int = 2) -> Iterator[bytes]:
    """``blob``, and every base64-looking run in it decoded (at each of the 4 offsets a run may
    have been cut at, both alphabets, white space between lines removed too), ``depth`` times over."""
    level = [blob]
    yield blob
    for _ in range(depth):
        nxt = []
        for b in level:
            for text in (b, re.sub(rb"\s+", b"", b)):
                for m in _RUN.finditer(text):
                    run = m.group().rstrip(b"=").translate(_URLSAFE)
                    for shift in range(4):
                        part = run[shift:]
                        part = part[: len(part) - 1] if len(part) % 4 == 1 else part
                        if len(part) >= 12:
                            nxt.append(base64.b64decode(part + b"=" * (-len(part) % 4)))
        yield from nxt
        level = nxt


def leaked(blobs: list[bytes], tokens: list[str]) -> list[str]:
    """The tokens found in ``blobs``, plain or base64-encoded (once or twice)."""
    found = set()
    for blob in blobs:
        for d in _decodings(blob):
            found |= {t for t in tokens if t.encode() in d}
    return sorted(found)


def write_bundle(files: dict[str, bytes], tmp: Path) -> list[bytes]:
    """``files`` as ``kpdoctor collect`` writes them: redacted by the collector's own step, then
    written as a folder and as a .tar.gz; every file, every archive member and the whole
    uncompressed archive stream."""
    arts = [Collected(p, d, source=f"cat {p}", started_at="2026-01-02T15:04:05.000Z") for p, d in files.items()]
    bundle = Bundle(artifacts=arts, node="worker-1", hostname="worker-1", collected_at="2026-01-02T15:04:05.000Z")
    live._redact(bundle, False)
    folder = write_dir(bundle, tmp / "bundle")
    tar = write_tar(bundle, tmp / "bundle.tar.gz", "kpdoctor-bundle")
    out = [f.read_bytes() for f in sorted(folder.rglob("*")) if f.is_file()]
    with tarfile.open(tar) as tf:
        for m in tf.getmembers():
            fh = tf.extractfile(m)
            if fh is not None:
                out.append(fh.read())
    out.append(gzip.decompress(tar.read_bytes()))
    return out


def _planted(form: Form, n: int = 3) -> tuple[str, list[str]]:
    """``n`` copies of the form, each with its own token (JSON forms: one document, one token)."""
    if form.path.endswith(".json"):
        t = token(form.kind)
        return form.make(t), [t]
    toks = [token(form.kind) for _ in range(n)]
    return "".join(form.make(t) for t in toks), toks


# --------------------------------------------------------------------------------------------
# Tests
# --------------------------------------------------------------------------------------------


def test_the_search_finds_what_it_must() -> None:
    """The leak search itself: plain, base64 at any alignment, inside a PEM, base64 of a PEM."""
    t = token()
    for text in (t, "x" + b64(t), "xy" + b64("a" + t), b64("ab" + t), pem("PRIVATE KEY", t), b64(pem("PRIVATE KEY", t))):
        assert leaked([f"line {text} end\n".encode()], [t]) == [t], text
    wrapped = base64.encodebytes(pem("PRIVATE KEY", t).encode()).decode()
    assert leaked([textwrap.indent(wrapped, "  ").encode()], [t]) == [t]
    assert leaked([b"nothing here <redacted>\n"], [t]) == []


@pytest.mark.parametrize("form", FORMS, ids=[f.name for f in FORMS])
def test_no_canary_reaches_the_bundle(tmp_path: Path, form: Form) -> None:
    text, toks = _planted(form)
    assert leaked([text.encode()], toks) == sorted(toks)  # planted where the search finds them
    blobs = write_bundle({form.path: text.encode()}, tmp_path)
    assert not leaked(blobs, toks), (form.name, redact_secrets(form.path, text.encode()).decode())
    if not form.path.endswith(".json"):
        out = redact_secrets(form.path, text.encode())
        assert out.count(b"\n") == text.count("\n")  # the line count the findings cite stays
        assert b"<redacted>" in out


def test_every_form_at_once_in_one_bundle(tmp_path: Path) -> None:
    """All forms together, each file holding its forms one after the other among real lines."""
    files: dict[str, list[str]] = {}
    toks: list[str] = []
    real = (DATA / "logs" / "healthy-structured-era.log").read_text().splitlines(keepends=True)
    for i, form in enumerate(FORMS):
        if form.path.endswith(".json"):
            continue  # one document per file: the per-form test
        text, ts = _planted(form, 2)
        toks += ts
        part = files.setdefault(form.path, [])
        if form.path == KP:
            part.append(real[i % len(real)])
        part.append(text)
    blobs = write_bundle({p: "".join(parts).encode() for p, parts in files.items()}, tmp_path)
    assert not leaked(blobs, toks)
    log = redact_secrets(KP, "".join(files[KP]).encode()).decode().splitlines(keepends=True)
    assert {line for line in real if line in "".join(files[KP])} <= set(log)  # the real lines stay


_KLOG_FORMS = [
    "{k}: {s}",
    "{k}={s}",
    "{k} = {s}",
    '"{k}":"{s}"',
    '"{k}": "{s}"',
    '\\"{k}\\":\\"{s}\\"',
    "{k}:{s}",
    "{k}: '{s}'",
    "[{k}:{s}]",
]
_KEYS = [
    "password",
    "Password",
    "db_password",
    "passwd",
    "token",
    "bearerToken",
    "id-token",
    "secret",
    "clientSecret",
    "client-key-data",
    "api_key",
    "apiKey",
    "X-API-KEY",
    "access_key",
    "secret_key",
    "private-key",
    "passphrase",
]


@settings(max_examples=150, deadline=None)
@given(
    key=st.sampled_from(_KEYS),
    form=st.sampled_from(_KLOG_FORMS),
    secret=st.text(alphabet=string.ascii_letters + string.digits + "-_.~+=!#$%&*?@^", min_size=12, max_size=40),
    before=st.sampled_from(["", "loaded ", "config ", "msg=x ", "{"]),
    after=st.sampled_from(["", " user=admin", ", next: 1", "}", " ok"]),
)
def test_a_key_anywhere_in_a_klog_line(key: str, form: str, secret: str, before: str, after: str) -> None:
    if secret.lower() in ("true", "false", "null", "none") or secret.startswith("="):
        return  # not secrets; `password:=x` is Go's `:=`, `password==x` a comparison
    line = K + before + form.format(k=key, s=secret) + after + "\n"
    out = redact_secrets(KP, line.encode()).decode()
    assert secret not in out, (line, out)
    assert out.startswith(K) and out.count("\n") == 1


# --------------------------------------------------------------------------------------------
# Real fixtures: nothing else changes
# --------------------------------------------------------------------------------------------

FIXTURES = [
    *sorted((DATA / "logs").glob("*.log")),
    *sorted((DATA / "iptables" / "real").glob("*.txt")),
    *sorted((DATA / "nftables").rglob("ruleset.txt")),
    *sorted((DATA / "nftables").rglob("*.nft")),
    *sorted((DATA / "node").glob("sysctl*.txt")),
    *sorted((DATA / "node").glob("conntrack-*.txt")),
    *sorted((DATA / "node").glob("proc-*.txt")),
    DATA / "node" / "dmesg-formats.txt",
]
_PLANT = [
    K + "headers: X-Auth-Token: {s}",
    K + 'body="{{\\"password\\":\\"{s}\\"}}"',
    K + "kubeconfig user: client-key-data: {s}",
    PS.format(pid=7) + "mysql -uroot -p{s} shop",
    "password = {s}",
]


@pytest.mark.parametrize("path", FIXTURES, ids=[str(p.relative_to(DATA)) for p in FIXTURES])
def test_fixtures_change_only_where_a_secret_was_planted(path: Path) -> None:
    """A real artifact with a secret line after every 7th line (from the first): the secrets go, every line of the
    artifact is byte for byte what it was (what the checks read, at the line numbers they cite)."""
    original = path.read_bytes().split(b"\n")
    lines, planted, toks = [], set(), []
    for i, line in enumerate(original):
        lines.append(line)
        if i % 7 == 0:
            t = token()
            toks.append(t)
            planted.add(len(lines))
            lines.append(_PLANT[len(toks) % len(_PLANT)].format(s=t).encode())
    out = redact_secrets(f"node/{path.name}", b"\n".join(lines)).split(b"\n")
    assert len(out) == len(lines)
    assert [x for i, x in enumerate(out) if i not in planted] == original
    assert not leaked([b"\n".join(out)], toks)
    assert redact_secrets(f"node/{path.name}", path.read_bytes()) == path.read_bytes()
