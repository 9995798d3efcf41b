"""What a hostile web page or a sloppy client can no longer get through the HTTP server: DNS
rebinding (the Host allow-list, and Origin checked against it), roles the chat template does not
handle, JSON that is not plain UTF-8 or repeats a key, a POST body that is not JSON, and absolute
filesystem paths in the info endpoints.

One in-process runtime on the real default model (HTTP + gRPC on 127.0.0.1) started with
``allowed_hosts`` extended, as ``sglc serve --allowed-hosts api.internal,web.internal:3000`` does;
the REAL `openai` and SGLang clients talk to it.
"""
from __future__ import annotations

import json
from typing import Any

import openai
import pytest

from grpc_helpers import runtime_fixture
from server_helpers import call, http_base, raw_exchange, status_of

pytestmark = pytest.mark.model

runtime = runtime_fixture(4096, http_port=0, allowed_hosts=("api.internal", "web.internal:3000"))

CHAT = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1, "temperature": 0}


@pytest.fixture(scope="module")
def base(runtime) -> str:
    return http_base(runtime)


@pytest.fixture(scope="module")
def port(base) -> int:
    return int(base.rsplit(":", 1)[1])


def error_of(data: bytes) -> dict[str, Any]:
    return json.loads(data)["error"]


# ----- DNS rebinding: the Host allow-list -----
def test_the_rebinding_pair_is_refused(base, port):
    """Host and Origin both naming the attacker's domain (same-origin in the browser's eyes) is a
    400 naming the rule and the flag, on every endpoint."""
    for method, path, body in (("GET", "/v1/models", None), ("POST", "/v1/chat/completions", CHAT),
                               ("POST", "/flush_cache", b"")):
        status, data = call(base, method, path, body, {"Host": f"evil.example:{port}",
                                                       "Origin": f"http://evil.example:{port}"})
        assert status == 400, (path, data)
        err = error_of(data)
        assert err["code"] == "host_not_allowed" and "DNS-rebinding" in err["message"]
        assert "--allowed-hosts" in err["message"] and "evil.example" in err["message"]


@pytest.mark.parametrize("host", ["evil.example", "evil.example:{port}", "localhost.evil.example:{port}",
                                  "127.0.0.1.nip.io:{port}", "[::2]:{port}", "web.internal:{port}", ":{port}"])
def test_a_host_not_allowed_is_400(base, port, host):
    """A Host that is no loopback name, not the bound address and not an --allowed-hosts entry is
    refused even without an Origin (an entry with a port allows that port only)."""
    status, data = call(base, "GET", "/v1/models", None, {"Host": host.format(port=port)})
    assert status == 400 and error_of(data)["code"] == "host_not_allowed"


@pytest.mark.parametrize("host", ["localhost:{port}", "127.0.0.1:{port}", "[::1]:{port}", "LocalHost:{port}",
                                  "localhost", "api.internal:{port}", "api.internal", "web.internal:3000"])
def test_loopback_names_and_allowed_hosts_are_served(base, port, host):
    """The loopback names, the bound address and every --allowed-hosts entry are answered."""
    status, data = call(base, "GET", "/v1/models", None, {"Host": host.format(port=port)})
    assert status == 200, data


def test_a_request_without_a_host_header_is_served(base):
    """HTTP/1.0 without Host (no browser sends that) is answered."""
    response = raw_exchange(base, b"GET /v1/models HTTP/1.0\r\n\r\n")
    assert status_of(response) == 200, response[:300]


# ----- Origin: an allowed host on this server's port -----
@pytest.mark.parametrize("origin", ["http://localhost:{port}", "http://127.0.0.1:{port}", "http://[::1]:{port}",
                                    "http://api.internal:{port}", "http://web.internal:3000"])
def test_an_allowed_origin_is_served(base, port, origin):
    """An Origin naming an allowed host on this server's port (or an entry with its own port) passes,
    whichever allowed name the Host uses."""
    status, data = call(base, "POST", "/v1/chat/completions", CHAT, {"Origin": origin.format(port=port)})
    assert status == 200, data


@pytest.mark.parametrize("origin", ["http://evil.example:{port}", "http://evil.example", "null",
                                    "http://localhost:{other}", "http://web.internal:{port}",
                                    "http://user@localhost:{port}", "http://[::1"])
def test_a_foreign_origin_is_403(base, port, origin):
    """An Origin that is not an allowed host on this port (another site, another local web app, a
    sandboxed page) is a 403 naming the rule, before any work."""
    headers = {"Origin": origin.format(port=port, other=port + 1 if port < 65535 else port - 1)}
    status, data = call(base, "POST", "/v1/chat/completions", CHAT, headers)
    assert status == 403, data
    err = error_of(data)
    assert err["code"] == "cross_origin" and "--allowed-hosts" in err["message"]


def test_allowed_hosts_star_allows_any_host_but_keeps_same_origin():
    """``*`` (documented unsafe) answers any Host; an Origin must then still equal the Host."""
    from sglc_runtime.server.host_allowlist import HostAllowList

    hosts = HostAllowList("127.0.0.1", ["*"])
    assert hosts.allows_header("anything.example:80")
    assert hosts.allows_origin("http://anything.example:80", "anything.example:80")
    assert not hosts.allows_origin("http://other.example:80", "anything.example:80")


def test_bound_to_every_interface_allows_ip_literals_and_the_machine_name():
    """Bound to 0.0.0.0, an IP-literal Host (which cannot be rebound) and this machine's name are
    answered, a domain is not; an IP Origin must still be the Host itself."""
    import socket

    from sglc_runtime.server.host_allowlist import HostAllowList

    hosts = HostAllowList("0.0.0.0")
    assert hosts.allows_header("10.1.2.3:30000") and hosts.allows_header("[fe80::1]:30000")
    assert hosts.allows_header(f"{socket.gethostname()}:30000")
    assert not hosts.allows_header("evil.example:30000")
    assert hosts.allows_origin("http://10.1.2.3:30000", "10.1.2.3:30000")
    assert not hosts.allows_origin("http://10.9.9.9:30000", "10.1.2.3:30000")


def test_serve_rejects_a_malformed_allowed_host_before_loading_the_model(capsys):
    """`sglc serve --allowed-hosts 'a:b'` is one line naming the entry, exit 2."""
    from sglc.cli import main

    code = main(["serve", "--allowed-hosts", "ok.example,a:b", "--port", "0", "--model", "/no/such/model"])
    err = capsys.readouterr().err
    assert code == 2 and "'a:b'" in err and "--allowed-hosts" in err


# ----- strict parsing -----
def test_a_role_the_chat_template_does_not_handle_is_400(base, runtime):
    """A chat message with role "root" is refused naming the role and the accepted ones (the real
    openai client sees a BadRequestError); system / user / assistant still work."""
    client = openai.OpenAI(base_url=base + "/v1", api_key="sk-test", max_retries=0, timeout=120)
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(model="default", max_tokens=1, messages=[
            {"role": "system", "content": "Be brief."}, {"role": "root", "content": "obey"}])
    body = err.value.body if isinstance(err.value.body, dict) else {}
    body = body.get("error", body)
    message = str(body.get("message", err.value))
    assert "'root'" in message and "assistant, system, user" in message
    assert body.get("param") == "messages[1].role"
    ok = client.chat.completions.create(model="default", max_tokens=1, temperature=0, messages=[
        {"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello."}, {"role": "user", "content": "Bye"}])
    assert ok.choices[0].finish_reason == "length"


@pytest.mark.parametrize("raw, words", [
    (b"\xef\xbb\xbf" + json.dumps(CHAT).encode(), "UTF-8 byte-order mark"),
    (json.dumps(CHAT).encode("utf-16"), "UTF-16-LE byte-order mark"),
    (json.dumps(CHAT).encode("utf-16-le"), "UTF-16-LE"),
    (json.dumps(CHAT).encode("utf-16-be"), "UTF-16-BE"),
    (json.dumps(CHAT).encode("utf-32-le"), "UTF-32-LE"),
    (json.dumps({"messages": [{"role": "user", "content": "caf\u00e9"}]}).replace("\\u00e9", "\u00e9")
     .encode("latin-1"), "not UTF-8"),
], ids=["bom", "utf16-bom", "utf16le", "utf16be", "utf32le", "latin1"])
def test_json_bodies_must_be_utf8_without_a_bom(base, raw, words):
    """A BOM, UTF-16/32 or Latin-1 body is a 400 naming the encoding (json.loads would accept most)."""
    status, data = call(base, "POST", "/v1/chat/completions", raw, {"Content-Type": "application/json"})
    assert status == 400 and words in error_of(data)["message"], data


def test_a_charset_other_than_utf8_is_415(base):
    """``Content-Type: application/json; charset=utf-16`` is refused naming the charset."""
    status, data = call(base, "POST", "/v1/chat/completions", json.dumps(CHAT).encode("utf-16"),
                        {"Content-Type": "application/json; charset=utf-16"})
    assert status == 415 and "utf-16" in error_of(data)["message"]


@pytest.mark.parametrize("path, raw, key", [
    ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1, "max_tokens": 9}',
     "max_tokens"),
    ("/v1/chat/completions", b'{"messages": [{"role": "user", "role": "root", "content": "Hi"}], "max_tokens": 1}',
     "role"),
    ("/generate", b'{"text": "Hi", "sampling_params": {"max_new_tokens": 1, "temperature": 0, "temperature": 1}}',
     "temperature"),
])
def test_a_duplicate_key_is_400_naming_it(base, path, raw, key):
    """A key twice in one JSON object (at any depth) is refused naming the key: which one would
    count is ambiguous, and proxies in front may have read the other."""
    status, data = call(base, "POST", path, raw, {"Content-Type": "application/json"})
    err = error_of(data)
    assert status == 400 and f"{key!r} twice" in err["message"] and err["param"] == key, data


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data"])
def test_flush_cache_refuses_a_body_that_is_not_json(base, content_type):
    """/flush_cache with a "simple request" content type (what a web page may send without a
    preflight) is 415 naming the rule, like every POST."""
    status, data = call(base, "POST", "/flush_cache", b"{}", {"Content-Type": content_type})
    assert status == 415 and "application/json" in error_of(data)["message"], data
    status, data = call(base, "POST", "/abort_request", b'{"abort_all": true}', {"Content-Type": content_type})
    assert status == 415, data


def test_flush_cache_takes_what_sglang_and_requests_send(base, runtime):
    """A bodiless POST (requests.post(url + "/flush_cache"), sglang-router) and SGLang's client
    (application/json, no body) still flush."""
    from server_helpers import wait_idle

    wait_idle(runtime)
    assert call(base, "POST", "/flush_cache", b"")[0] == 200
    assert call(base, "POST", "/flush_cache", b"", {"Content-Type": "application/json; charset=utf-8"})[0] == 200
    status, data = call(base, "POST", "/flush_cache", b"x", {"Content-Length": "1"})
    assert status == 415, data


# ----- no absolute paths in the info endpoints -----
def _strings(value: Any) -> list[str]:
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)] + [k for k in value if isinstance(k, str)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return [value] if isinstance(value, str) else []


@pytest.mark.parametrize("path", ["/get_model_info", "/model_info", "/get_server_info", "/server_info", "/v1/models"])
def test_info_endpoints_show_no_absolute_path(base, runtime, path):
    """No string in the info endpoints is an absolute path; the model path is the model's name."""
    status, data = call(base, "GET", path)
    assert status == 200
    info = json.loads(data)
    absolute = runtime.service.model_info().model_path
    assert absolute.startswith("/")
    assert not [s for s in _strings(info) if s.startswith("/") or absolute in s], info
    if "model_path" in info:
        assert info["model_path"] == "SmolLM2-135M-Instruct"


def test_expose_paths_shows_the_absolute_path(runtime):
    """With --expose-paths (HttpServer(expose_paths=True)) the model path is the absolute one."""
    from sglc_runtime.server.http_server import HttpServer

    server = HttpServer(runtime.service, "127.0.0.1", 0, expose_paths=True)
    server.start()
    try:
        status, data = call(f"http://{server.address}", "GET", "/get_model_info")
        assert status == 200 and json.loads(data)["model_path"] == runtime.service.model_info().model_path
    finally:
        server.stop().wait(10)


def test_public_path_keeps_the_name_sglangs_template_matching_reads():
    """A hub snapshot shows as org/name (SGLang picks a chat template from it); others by file or
    folder name; a relative name is unchanged."""
    from sglang.lang.chat_template import get_chat_template_by_model_path

    from sglc_runtime.server.public_paths import public_path

    snapshot = "/home/u/.cache/huggingface/hub/models--Qwen--Qwen2.5-0.5B-Instruct/snapshots/0a1b2c"
    assert public_path(snapshot) == "Qwen/Qwen2.5-0.5B-Instruct"
    assert get_chat_template_by_model_path(public_path(snapshot)).name == \
        get_chat_template_by_model_path(snapshot).name
    assert public_path("/srv/models/llama-3-8b-instruct.Q4_K_M.gguf") == "llama-3-8b-instruct.Q4_K_M.gguf"
    assert public_path("C:\\models\\SmolLM2") == "SmolLM2"
    assert public_path("org/name") == "org/name" and public_path("default") == "default"
