{{/*
The chart name, or nameOverride.
*/}}
{{- define "stead.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The name prefix of every resource: fullnameOverride, else <release>-<name>, else <release> when the
release name already contains the chart name. Truncated so that suffixed names stay within 63
characters.
*/}}
{{- define "stead.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 40 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/*
chart-version, for the helm.sh/chart label.
*/}}
{{- define "stead.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Labels of every resource.
*/}}
{{- define "stead.labels" -}}
helm.sh/chart: {{ include "stead.chart" . }}
app.kubernetes.io/name: {{ include "stead.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ include "stead.imageTag" . | trunc 63 | trimSuffix "-" | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: stead
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/*
Selector labels of the operator pods (immutable in the StatefulSet: never change them).
*/}}
{{- define "stead.selectorLabels" -}}
app.kubernetes.io/name: {{ include "stead.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end }}

{{/*
Labels of the operator's own resources (StatefulSet, pods, headless Service).
*/}}
{{- define "stead.operatorLabels" -}}
{{ include "stead.labels" . }}
app.kubernetes.io/component: operator
{{- end }}

{{/*
Labels of the webhook's resources (Service, certificate, configuration).
*/}}
{{- define "stead.webhookLabels" -}}
{{ include "stead.labels" . }}
app.kubernetes.io/component: webhook
{{- end }}

{{/*
The operator's ServiceAccount name.
*/}}
{{- define "stead.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "stead.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
Names of the headless Service, the webhook Service, the webhook's TLS Secret and Certificate.
*/}}
{{- define "stead.headlessServiceName" -}}
{{- printf "%s-headless" (include "stead.fullname" .) }}
{{- end }}

{{- define "stead.webhookServiceName" -}}
{{- printf "%s-webhook" (include "stead.fullname" .) }}
{{- end }}

{{- define "stead.webhookSecretName" -}}
{{- printf "%s-webhook-tls" (include "stead.fullname" .) }}
{{- end }}

{{- define "stead.webhookCertificateName" -}}
{{- printf "%s-webhook" (include "stead.fullname" .) }}
{{- end }}

{{- define "stead.configApiServiceName" -}}
{{- printf "%s-config-api" (include "stead.fullname" .) }}
{{- end }}

{{/*
The DNS names of one Service (argument: list of the Service name and the namespace), most
specific first; the API server calls a webhook at <service>.<namespace>.svc.
*/}}
{{- define "stead.serviceDNSNames" -}}
{{- $svc := index . 0 }}
{{- $ns := index . 1 }}
{{- list (printf "%s.%s.svc" $svc $ns) $svc (printf "%s.%s" $svc $ns) (printf "%s.%s.svc.cluster.local" $svc $ns) | toJson }}
{{- end }}

{{/*
DNS names of the webhook Service.
*/}}
{{- define "stead.webhookDNSNames" -}}
{{- include "stead.serviceDNSNames" (list (include "stead.webhookServiceName" .) .Release.Namespace) }}
{{- end }}

{{/*
The subject alternative names of the serving certificate, which the webhook and the config API
share (both read /etc/stead/webhook): the webhook Service's DNS names first (the first is the
common name), then, with the config API, its Service's names and localhost/127.0.0.1 so that
`kubectl port-forward` + `stead config --server https://127.0.0.1:<port> --cacert ca.crt` verifies.
A JSON object {dnsNames: [...], ipAddresses: [...]}.
*/}}
{{- define "stead.tlsSANs" -}}
{{- $dnsNames := include "stead.webhookDNSNames" . | fromJsonArray }}
{{- $ips := list }}
{{- if .Values.configApi.enabled }}
{{- $dnsNames = concat $dnsNames (include "stead.serviceDNSNames" (list (include "stead.configApiServiceName" .) .Release.Namespace) | fromJsonArray) (list "localhost") }}
{{- $ips = list "127.0.0.1" }}
{{- end }}
{{- dict "dnsNames" $dnsNames "ipAddresses" $ips | toJson }}
{{- end }}

{{/*
The CustomResourceDefinition of one plural among the chart's (argument: list of the root context
and the plural), as JSON; "{}" when the chart ships no such kind.
*/}}
{{- define "stead.crdOf" -}}
{{- $found := dict }}
{{- range $crd := include "stead.crds" (index . 0) | fromJsonArray }}
{{- if eq $crd.spec.names.plural (index $ 1) }}
{{- $found = $crd }}
{{- end }}
{{- end }}
{{- toJson $found }}
{{- end }}

{{/*
"true" when a CRD (a parsed object) asks for a mutating webhook (annotation
stead.dev/mutating-webhook: "true", written by `stead crds` for the kinds that mutate).
*/}}
{{- define "stead.mutates" -}}
{{- if eq (toString (dig "metadata" "annotations" "stead.dev/mutating-webhook" "" .)) "true" }}true{{ end }}
{{- end }}

{{/*
"true" when a CRD asks for a validating webhook (annotation stead.dev/validating-webhook: "true":
the kind has checks its schema cannot express; a kind whose schema says it all needs none).
*/}}
{{- define "stead.validates" -}}
{{- if eq (toString (dig "metadata" "annotations" "stead.dev/validating-webhook" "" .)) "true" }}true{{ end }}
{{- end }}

{{/*
"true" when a CRD's objects hold Stead's finalizer (annotation stead.dev/finalizer: "true", written by
`stead crds` for the kinds with a cleanup): the operator JSON-patches their metadata.finalizers.
*/}}
{{- define "stead.finalizes" -}}
{{- if eq (toString (dig "metadata" "annotations" "stead.dev/finalizer" "" .)) "true" }}true{{ end }}
{{- end }}

{{/*
The image tag (appVersion unless set) and the full image reference.
*/}}
{{- define "stead.imageTag" -}}
{{- default .Chart.AppVersion .Values.image.tag }}
{{- end }}

{{- define "stead.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s:%s@%s" .Values.image.repository (include "stead.imageTag" .) .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (include "stead.imageTag" .) }}
{{- end }}
{{- end }}

{{/*
The CustomResourceDefinitions the chart ships (files/crds/*.yaml, copies of the repository's
crds/ written by `stead crds`), as a JSON list of parsed objects. Every per-kind resource (CRDs,
RBAC rules, webhooks) is derived from this list: adding a kind needs no template change.
*/}}
{{- define "stead.crds" -}}
{{- $crds := list }}
{{- range $path, $_ := .Files.Glob "files/crds/*.yaml" }}
{{- $crd := fromYaml ($.Files.Get $path) }}
{{- if hasKey $crd "Error" }}
{{- fail (printf "%s: %s" $path $crd.Error) }}
{{- end }}
{{- if ne (default "" $crd.kind) "CustomResourceDefinition" }}
{{- fail (printf "%s is not a CustomResourceDefinition" $path) }}
{{- end }}
{{- $crds = append $crds $crd }}
{{- end }}
{{- if not $crds }}
{{- fail "no CRDs found in files/crds/ (run `stead crds`)" }}
{{- end }}
{{- toJson $crds }}
{{- end }}

{{/*
The web console's resources (Deployment, Service, ServiceAccount, Ingress): <fullname>-console.
*/}}
{{- define "stead.consoleName" -}}
{{- printf "%s-console" (include "stead.fullname" .) }}
{{- end }}

{{/*
Selector labels of the console's pods (immutable in the Deployment: never change them). Its own
component, so that the operator's Services never select a console pod, nor the console's an operator.
*/}}
{{- define "stead.consoleSelectorLabels" -}}
app.kubernetes.io/name: {{ include "stead.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: console
{{- end }}

{{- define "stead.consoleLabels" -}}
{{ include "stead.labels" . }}
app.kubernetes.io/component: console
{{- end }}

{{/*
The Secret holding the console's session key: console.sessionKey.existingSecret, else the chart's.
*/}}
{{- define "stead.consoleSessionSecretName" -}}
{{- default (printf "%s-console-session" (include "stead.fullname" .)) .Values.console.sessionKey.existingSecret }}
{{- end }}
