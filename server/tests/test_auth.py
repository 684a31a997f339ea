"""Login (v2 and legacy v1), the JWT's claims and lifetime, and the stream's token checks."""
import base64
import hashlib
import hmac
import time

import grpc
import pytest

from conftest import SECRET, config, jwt_claims, make_jwt, start
from speechclient_server._proto.speechly.identity.v1 import identity_pb2 as idv1, identity_pb2_grpc as idv1_grpc
from speechclient_server._proto.speechly.identity.v2 import identity_pb2 as idp, identity_pb2_grpc


def test_first_line_names_the_bound_port(server):
    host, port = server.address.rsplit(":", 1)
    assert server.first_line == f"listening on 127.0.0.1:{port}\n" and int(port) > 0


def test_login_issues_an_hs256_jwt_with_the_claims(server):
    before = int(time.time())
    r = server.login(app_id="my-app", device_id="0b0c4f4e-6a55-4f0e-9d8c-0f8c3a1b2c3d")
    head, _, sig = r.token.split(".")
    assert "=" not in r.token and sig
    claims = jwt_claims(r.token)
    assert claims["appId"] == "my-app" and claims["deviceId"] == "0b0c4f4e-6a55-4f0e-9d8c-0f8c3a1b2c3d"
    assert claims["scope"] == "slu" and "projectId" not in claims
    assert before <= claims["iat"] <= time.time() and claims["exp"] == claims["iat"] + 3600
    assert r.valid_for_s == 3600 and r.expires_at_epoch == claims["exp"]
    assert r.expires_at == time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(claims["exp"]))
    assert jwt_claims(head + "." + head + ".")["alg"] == "HS256"  # the header decodes the same way
    mac = hmac.new(SECRET.encode(), r.token.rsplit(".", 1)[0].encode(), hashlib.sha256).digest()
    assert sig == base64.urlsafe_b64encode(mac).rstrip(b"=").decode()


def test_project_login_and_legacy_v1_login(server):
    stub = identity_pb2_grpc.IdentityAPIStub(server.channel)
    r = stub.Login(idp.LoginRequest(device_id="d", project=idp.ProjectScope(project_id="proj")))
    claims = jwt_claims(r.token)
    assert claims["projectId"] == "proj" and "appId" not in claims and claims["deviceId"] == "d"
    v1 = idv1_grpc.IdentityStub(server.channel).Login(idv1.LoginRequest(device_id="d", app_id="a"))
    assert jwt_claims(v1.token)["appId"] == "a"


def test_token_validity_is_configurable(start_server):
    s = start_server("--token-validity", "120")
    r = s.login()
    claims = jwt_claims(r.token)
    assert r.valid_for_s == 120 and claims["exp"] - claims["iat"] == 120


@pytest.mark.parametrize("request_, text", [
    (idp.LoginRequest(application=idp.ApplicationScope(app_id="a")), "device_id"),
    (idp.LoginRequest(device_id="d"), "scope"),
    (idp.LoginRequest(device_id="d", application=idp.ApplicationScope()), "app_id"),
    (idp.LoginRequest(device_id="d", project=idp.ProjectScope()), "project_id"),
])
def test_login_rejects_incomplete_requests(server, request_, text):
    with pytest.raises(grpc.RpcError) as e:
        identity_pb2_grpc.IdentityAPIStub(server.channel).Login(request_)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and text in e.value.details()


def test_allow_list_of_app_ids(start_server):
    s = start_server("--allow-app-id", "good", "--allow-app-id", "also-good")
    assert jwt_claims(s.login(app_id="also-good").token)["appId"] == "also-good"
    with pytest.raises(grpc.RpcError) as e:
        s.login(app_id="bad")
    assert e.value.code() == grpc.StatusCode.PERMISSION_DENIED and "bad" in e.value.details()
    # A project token names its app at start: the allow-list applies there.
    project = identity_pb2_grpc.IdentityAPIStub(s.channel).Login(
        idp.LoginRequest(device_id="d", project=idp.ProjectScope(project_id="p"))).token
    with pytest.raises(grpc.RpcError) as e:
        s.stream([config(), start("bad")], token=project)
    assert e.value.code() == grpc.StatusCode.PERMISSION_DENIED
    kinds = [r.WhichOneof("streaming_response") for r in s.stream([config(), start("good")], token=project)]
    assert kinds == ["started", "finished"]


@pytest.mark.parametrize("metadata, text", [
    ([], "missing"),
    ([("authorization", "Basic dXNlcjpwYXNz")], "Bearer"),
    ([("authorization", "Bearer x.y.z")], "signature"),
    ([("authorization", "Bearer not-a-jwt")], "malformed"),
])
def test_stream_needs_a_valid_token(server, metadata, text):
    from speechclient_server._proto.speechly.slu.v1 import slu_pb2_grpc
    with pytest.raises(grpc.RpcError) as e:
        list(slu_pb2_grpc.SLUStub(server.channel).Stream(iter([config()]), metadata=metadata, timeout=10))
    assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED and text in e.value.details()


def test_token_signed_with_another_secret_is_rejected(server):
    token = make_jwt({"appId": "a", "deviceId": "d", "scope": "slu", "exp": int(time.time()) + 60}, secret="other")
    with pytest.raises(grpc.RpcError) as e:
        server.stream([config()], token=token)
    assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED and "signature" in e.value.details()


def test_expired_token_is_unauthenticated(start_server):
    s = start_server("--token-validity", "1")
    token = s.login().token
    assert [r.WhichOneof("streaming_response") for r in s.stream([config(), start()], token=token)] \
        == ["started", "finished"]
    time.sleep(jwt_claims(token)["exp"] - time.time() + 0.2)
    with pytest.raises(grpc.RpcError) as e:
        s.stream([config()], token=token)
    assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED and "expired" in e.value.details()


def test_token_without_slu_scope_is_permission_denied(server):
    token = make_jwt({"appId": "a", "deviceId": "d", "scope": "wlu", "exp": int(time.time()) + 60})
    with pytest.raises(grpc.RpcError) as e:
        server.stream([config()], token=token)
    assert e.value.code() == grpc.StatusCode.PERMISSION_DENIED and "scope" in e.value.details()


def test_start_app_id_must_match_the_token(server):
    token = server.login(app_id="mine").token
    assert [r.WhichOneof("streaming_response") for r in server.stream([config(), start("mine")], token=token)] \
        == ["started", "finished"]
    with pytest.raises(grpc.RpcError) as e:
        server.stream([config(), start("theirs")], token=token)
    assert e.value.code() == grpc.StatusCode.PERMISSION_DENIED


def test_project_token_needs_an_app_id_at_start(server):
    token = identity_pb2_grpc.IdentityAPIStub(server.channel).Login(
        idp.LoginRequest(device_id="d", project=idp.ProjectScope(project_id="p"))).token
    with pytest.raises(grpc.RpcError) as e:
        server.stream([config(), start()], token=token)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "app_id" in e.value.details()
