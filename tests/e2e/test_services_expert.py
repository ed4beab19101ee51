"""Expert mode end to end (issue 31, item 6), with real users judged by the API server's RBAC: a tenant bound
to `edit` (and Stead's kinds with the chart's verbs) is refused, the refusal naming the permission; a tenant
who also has ClusterRole stead-expert forces a state, edits the active set (`stead service expert`) and destroys
an instance without the lifecycle's delete, each audited in the log and an Event under the tenant's name; a
request signed with another user's name is refused. (Named test_app_service_*: the session's operator trusts
those namespaces to run the greeter's scripts on its host.)"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from operators.cluster import Binaries, ClusterInfo
from tests.e2e.conftest import STEAD, Kubectl, OperatorProcess
from tests.e2e.tenant_accounts import CHART_EDIT_VERBS, tenant_kubectl
from tests.e2e.test_apps import apply, get
from tests.e2e.test_services import catalog, in_state, instance, status_of
from tests.polling import wait_until

PERMISSION = 'verb "expert" on resource "serviceinstances" in API group "stead.dev"'


def expert_request(namespace: str, account: str, version: int, **fields: Any) -> str:
    return json.dumps({"spec": {"expert": {"user": f"system:serviceaccount:{namespace}:{account}",
                                           "currentVersion": version, **fields}}})


def events(kubectl: Kubectl, namespace: str, name: str) -> list[tuple[str, str]]:
    items = json.loads(kubectl("get", "events", "-n", namespace, "--field-selector",
                               f"involvedObject.name={name},involvedObject.kind=ServiceInstance", "-o",
                               "json").stdout)["items"]
    return [(e["reason"], e["message"]) for e in items]


def test_app_service_expert_mode_needs_its_permission_names_its_user_and_skips_the_lifecycle(
        operator: OperatorProcess, kubectl: Kubectl, cluster: ClusterInfo, binaries: Binaries, namespace: str,
        tmp_path: Path) -> None:
    catalog(kubectl, namespace)
    apply(kubectl, instance("db-1", namespace, who="one"))
    editor = tenant_kubectl(kubectl, cluster, binaries, namespace, tmp_path, account="editor",
                            stead_verbs=CHART_EDIT_VERBS)
    expert = tenant_kubectl(kubectl, cluster, binaries, namespace, tmp_path, account="expert",
                            stead_verbs=CHART_EDIT_VERBS)
    kubectl("create", "rolebinding", "expert-mode", "-n", namespace, "--clusterrole=stead-expert",
            f"--serviceaccount={namespace}:expert")
    user = f"system:serviceaccount:{namespace}:expert"
    version = in_state(kubectl, namespace, "db-1", "up")["version"]

    # edit (the everyday role) may update the instance but not use expert mode: refused naming the permission
    refused = editor("patch", "si", "db-1", "--type", "merge", "-p",
                     expert_request(namespace, "editor", version, operation="setState", state="update_rejected"),
                     check=False)
    assert refused.returncode != 0 and PERMISSION in refused.stderr, refused.stderr
    assert f"system:serviceaccount:{namespace}:editor may not use expert mode" in refused.stderr
    # the expert cannot sign with someone else's name: the audit names the real user
    forged = expert("patch", "si", "db-1", "--type", "merge", "-p", json.dumps({"spec": {"expert": {
        "user": "alice", "currentVersion": version, "operation": "setState", "state": "update_rejected"}}}),
                    check=False)
    assert forged.returncode != 0 and f"spec.expert.user: must be the requesting user ({user}), not alice" in \
        forged.stderr, forged.stderr

    # force a state no transfer leads to from up
    expert("patch", "si", "db-1", "--type", "merge", "-p",
           expert_request(namespace, "expert", version, operation="setState", state="update_rejected"))
    forced = in_state(kubectl, namespace, "db-1", "update_rejected", version_above=version)
    entry = forced["log"][-1]
    assert (entry["from"], entry["trigger"], entry["user"]) == ("up", "expert", user)
    assert (f'expert {user} forced state "update_rejected" (version {forced["version"]})'
            in [m for r, m in events(kubectl, namespace, "db-1") if r == "ExpertMode"])

    # edit the active set with the CLI (as the expert, with its kubeconfig): the App takes the new input
    config = tmp_path / f"{namespace}-expert.kubeconfig"
    done = subprocess.run([str(STEAD), "service", "expert", "edit", "db-1", "active", "--attr", "who=expert",
                           "-n", namespace, "--kubeconfig", str(config)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert f"expert editAttributes sent by {user}" in done.stdout
    wait_until(lambda: get(kubectl, "app", "db-1", namespace)["spec"]["inputs"].get("who") == "expert", 30,
               "the App's input from the edited active set")
    edited = status_of(kubectl, namespace, "db-1")
    assert edited["activeAttributes"]["who"] == "expert" and edited["log"][-1]["user"] == user

    # destroy: a delete the lifecycle refuses in this state, done without it
    assert "cannot be deleted" in expert("delete", "si", "db-1", check=False).stderr
    expert("patch", "si", "db-1", "--type", "merge", "-p",
           expert_request(namespace, "expert", edited["version"], operation="destroy"))
    wait_until(lambda: kubectl("get", "si,app", "db-1", "-n", namespace, "--ignore-not-found", "-o", "name")
               .stdout.strip() == "", 30, "the instance and its App gone")
    seen = events(kubectl, namespace, "db-1")
    assert any(r == "ExpertMode" and f"expert {user} destroyed the instance" in m for r, m in seen)
    assert not any("on_delete" in m for r, m in seen if r == "Transfer")  # the lifecycle's delete never ran
