"""The ValidatingAdmissionPolicy that keeps the sharding labels honest when the webhook is not there.

The mutating webhook overwrites `stead.dev/shard-bucket` with the project's bucket, but a request
admitted while it is bypassed (`failurePolicy: Ignore`, the operator down, `--webhook off`) keeps
whatever its author wrote, and a `stead.dev/project` label is the user's in any case. Two values
do harm (issue 25, finding 16):

- a bucket outside 0-4095 is in no replica's selection: the object is seen by nobody (a bucket
  inside the range but not the project's is seen by that bucket's replica, which puts it right);
- a project label naming another namespace's project, or the pseudo-project of cluster-scoped
  objects, places the object on the replica of the author's choosing, beside another tenant's work.

The API server evaluates the policy itself, whether or not any webhook answers. A project label
must be the object's namespace or start with `<namespace>.` (namespace names have no dots, so no
other namespace can have such a project); no namespaced object may be in `CLUSTER_PROJECT`.
"""

from __future__ import annotations

from typing import Any

from operators.runtime.core.ring import PROJECT_LABEL
from operators.runtime.kube.admission import denying_policy
from operators.runtime.kube.client import KubeClient
from operators.runtime.shard.ring import BUCKET_LABEL, CLUSTER_PROJECT, DEFAULT_BUCKETS

POLICY_NAME = "stead-shard-labels"

VARIABLES = [
    {"name": "labels", "expression": "has(object.metadata.labels) ? object.metadata.labels : {}"},
    {"name": "oldLabels", "expression": "request.operation == 'UPDATE' && has(oldObject.metadata.labels)"
                                        " ? oldObject.metadata.labels : {}"},
    {"name": "project", "expression": f"'{PROJECT_LABEL}' in variables.labels ? variables.labels['{PROJECT_LABEL}']"
                                      " : object.metadata.namespace"},
    {"name": "oldProject", "expression": f"'{PROJECT_LABEL}' in variables.oldLabels"
                                         f" ? variables.oldLabels['{PROJECT_LABEL}'] : object.metadata.namespace"},
    {"name": "bucketUnchanged", "expression": (
        f"request.operation == 'UPDATE' && ('{BUCKET_LABEL}' in variables.labels) == ('{BUCKET_LABEL}' in "
        f"variables.oldLabels) && (!('{BUCKET_LABEL}' in variables.labels) || variables.labels['{BUCKET_LABEL}'] == "
        f"variables.oldLabels['{BUCKET_LABEL}'])")},
]
"""An UPDATE that leaves a label as it was is not judged by it: objects from before the policy can
still be changed, and their finalizers removed."""
BUCKET_RULE = (f"variables.bucketUnchanged || !('{BUCKET_LABEL}' in variables.labels) || "
               f"(variables.labels['{BUCKET_LABEL}'].matches('^(0|[1-9][0-9]{{0,3}})$') && "
               f"int(variables.labels['{BUCKET_LABEL}']) < {DEFAULT_BUCKETS})")
PROJECT_RULE = ("(request.operation == 'UPDATE' && variables.project == variables.oldProject) || "
                f"(variables.project != '{CLUSTER_PROJECT}' && (variables.project == object.metadata.namespace"
                " || variables.project.startsWith(object.metadata.namespace + '.')))")
PROJECT_MESSAGE = (f"'metadata.labels[{PROJECT_LABEL}]: ' + variables.project + ' is not a project of "
                   "namespace ' + object.metadata.namespace + ' (want the namespace, or ' + "
                   "object.metadata.namespace + '.<name>)'")


def shard_label_policy(name: str = POLICY_NAME) -> tuple[dict[str, Any], dict[str, Any]]:
    """The policy and its binding (Deny), for every namespaced kind of Stead's API group."""
    return denying_policy(name, ["*"], variables=VARIABLES, validations=[
        {"expression": BUCKET_RULE, "reason": "Invalid",
         "message": f"metadata.labels[{BUCKET_LABEL}]: must be a bucket number from 0 to "
                    f"{DEFAULT_BUCKETS - 1} (Stead's webhook sets it; leave it out)"},
        {"expression": PROJECT_RULE, "reason": "Invalid", "messageExpression": PROJECT_MESSAGE},
    ])


async def install_shard_label_policy(kube: KubeClient, name: str = POLICY_NAME) -> None:
    """Server-side apply the policy and its binding (`stead operator --install-crds`)."""
    policy, binding = shard_label_policy(name)
    api = "/apis/admissionregistration.k8s.io/v1"
    await kube.apply(f"{api}/validatingadmissionpolicies/{name}", policy)
    await kube.apply(f"{api}/validatingadmissionpolicybindings/{name}", binding)
