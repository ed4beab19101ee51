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
    expert = tenant_kubectl(kubectl, cluster, binaries, namespace, tmp_path, account="expert",
                            stead_verbs=CHART_EDIT_VERBS)
    user = f"system:serviceaccount:{namespace}:expert"
    version = in_state(kubectl, namespace, "db-1", "up")["version"]

    def force(signed_as: str) -> subprocess.CompletedProcess[str]:
        return expert("patch", "si", "db-1", "--type", "merge", "-p", json.dumps({"spec": {"expert": {
            "user": signed_as, "currentVersion": version, "operation": "setState", "state": "update_rejected"}}}),
                      check=False)

    # with edit (the everyday role) the tenant may update the instance but not use expert mode: refused, naming
    # the permission
    refused = force(user)
    assert refused.returncode != 0 and PERMISSION in refused.stderr, refused.stderr
    assert f"user {user} may not use expert mode" in refused.stderr
    kubectl("create", "rolebinding", "expert-mode", "-n", namespace, "--clusterrole=stead-expert",
            f"--serviceaccount={namespace}:expert")
    # granted expert mode, it still cannot sign with someone else's name: the audit names the real user
    forged = f"spec.expert.user: must be the requesting user ({user}), not alice"
    wait_until(lambda: forged in (err := force("alice").stderr) and PERMISSION not in err, 15,
               "the forged request refused as such, with expert mode granted (RBAC applied)")

    # force a state no transfer leads to from up
    assert force(user).returncode == 0
    forced = in_state(kubectl, namespace, "db-1", "update_rejected", version_above=version)
    entry = forced["log"][-1]
    assert (entry["from"], entry["trigger"], entry["user"]) == ("up", "expert", user)
    event = f'expert {user} forced state "update_rejected" (version {forced["version"]})'
    wait_until(lambda: ("ExpertMode", event) in events(kubectl, namespace, "db-1"), 10, "the ExpertMode Event")

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
    destroyed = f"expert {user} destroyed the instance and its App without the lifecycle's delete"
    wait_until(lambda: any(r == "ExpertMode" and destroyed in m for r, m in events(kubectl, namespace, "db-1")), 10,
               "the ExpertMode Event of the destroy")
    seen = events(kubectl, namespace, "db-1")
    assert not any("on_delete" in m for r, m in seen if r == "Transfer")  # the lifecycle's delete never ran
