{{/*
The application's name: app.kubernetes.io/name of every object, and the selector of the pods.
One release per namespace (selectors are namespaced); fullnameOverride renames the objects.
*/}}
{{- define "nsc.name" -}}
{{- .Chart.Name -}}
{{- end -}}

{{/* The name of the Deployment, ServiceAccount and RBAC objects; the others append to it. */}}
{{- define "nsc.fullname" -}}
{{- default .Chart.Name .Values.fullnameOverride | trunc 47 | trimSuffix "-" -}}
{{- end -}}

{{/*
The name of the network prober's DaemonSet, ServiceAccount and RBAC objects: the fullname with
its -service-controller suffix (if any) replaced by -network-prober, so nad-network-prober by
default (as deploy/prober names them), <fullname>-network-prober for another fullname. At most
62 characters.
*/}}
{{- define "nsc.proberName" -}}
{{- printf "%s-network-prober" (include "nsc.fullname" . | trimSuffix "-service-controller") -}}
{{- end -}}

{{/* The network prober's user name, as its ServiceAccount's tokens authenticate it. */}}
{{- define "nsc.proberUser" -}}
{{- printf "system:serviceaccount:%s:%s" (include "nsc.namespace" .) (include "nsc.proberName" .) -}}
{{- end -}}

{{/* The namespace of every namespaced object: namespace.name, or the release's. */}}
{{- define "nsc.namespace" -}}
{{- default .Release.Namespace .Values.namespace.name -}}
{{- end -}}

{{/* The namespace of the leader-election Lease (and of its Role). */}}
{{- define "nsc.leaseNamespace" -}}
{{- default (include "nsc.namespace" .) .Values.leaderElection.lease.namespace -}}
{{- end -}}

{{- define "nsc.selectorLabels" -}}
app.kubernetes.io/name: {{ include "nsc.name" . }}
{{- end -}}

{{/*
The labels of an object: (dict "ctx" $ "component" "controller"), component optional. The
chart's own labels win over commonLabels, so that no value can change a selector's meaning.
*/}}
{{- define "nsc.labels" -}}
{{- $ctx := .ctx -}}
{{- $labels := dict "app.kubernetes.io/name" (include "nsc.name" $ctx) -}}
{{- with .component -}}
{{- $_ := set $labels "app.kubernetes.io/component" . -}}
{{- end -}}
{{- if $ctx.Values.helmLabels -}}
{{- $_ := set $labels "helm.sh/chart" (printf "%s-%s" $ctx.Chart.Name $ctx.Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-") -}}
{{- $_ := set $labels "app.kubernetes.io/managed-by" $ctx.Release.Service -}}
{{- $_ := set $labels "app.kubernetes.io/instance" $ctx.Release.Name -}}
{{- $_ := set $labels "app.kubernetes.io/version" (include "nsc.imageTag" $ctx | trunc 63 | trimSuffix "-") -}}
{{- end -}}
{{- toYaml (merge $labels (deepCopy $ctx.Values.commonLabels)) -}}
{{- end -}}

{{/* The labels of the pods: the selector's, the component, commonLabels and podLabels. */}}
{{- define "nsc.podLabels" -}}
{{- $labels := dict "app.kubernetes.io/name" (include "nsc.name" .) "app.kubernetes.io/component" "controller" -}}
{{- toYaml (merge $labels (deepCopy .Values.podLabels) (deepCopy .Values.commonLabels)) -}}
{{- end -}}

{{/* The labels of the prober's pods (and its selector's two): commonLabels cannot override them. */}}
{{- define "nsc.proberPodLabels" -}}
{{- $labels := dict "app.kubernetes.io/name" (include "nsc.name" .) "app.kubernetes.io/component" "network-prober" -}}
{{- toYaml (merge $labels (deepCopy .Values.commonLabels)) -}}
{{- end -}}

{{- define "nsc.imageTag" -}}
{{- default .Chart.AppVersion .Values.image.tag -}}
{{- end -}}

{{/* repository@digest when a digest is set, else repository:tag (tag: appVersion). */}}
{{- define "nsc.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (include "nsc.imageTag" .) -}}
{{- end -}}
{{- end -}}

{{/* The prober's image, as nsc.image: repository@digest, else repository:tag (tag: the controller's). */}}
{{- define "nsc.proberImage" -}}
{{- $image := .Values.prober.image -}}
{{- if $image.digest -}}
{{- printf "%s@%s" $image.repository $image.digest -}}
{{- else -}}
{{- printf "%s:%s" $image.repository (default (include "nsc.imageTag" .) $image.tag) -}}
{{- end -}}
{{- end -}}

{{/*
The controller's flags: only those whose value differs from the controller's default (so that
the defaults render deploy.yaml's `run --log-format=json`).
*/}}
{{- define "nsc.args" -}}
{{- $args := list "run" (printf "--log-format=%s" .Values.log.format) -}}
{{- with .Values.log.filter -}}
{{- $args = append $args (printf "--log-filter=%s" .) -}}
{{- end -}}
{{- if not .Values.leaderElection.enabled -}}
{{- $args = append $args "--leader-election=false" -}}
{{- else -}}
{{- if ne .Values.leaderElection.lease.name "nad-service-controller" -}}
{{- $args = append $args (printf "--leader-election-lease=%s" .Values.leaderElection.lease.name) -}}
{{- end -}}
{{- with .Values.leaderElection.lease.namespace -}}
{{- $args = append $args (printf "--leader-election-namespace=%s" .) -}}
{{- end -}}
{{- end -}}
{{- with .Values.watchNamespace -}}
{{- $args = append $args (printf "--watch-namespace=%s" .) -}}
{{- end -}}
{{- if not (kindIs "invalid" .Values.maxEndpointsPerSlice) -}}
{{- $args = append $args (printf "--max-endpoints-per-slice=%d" (int .Values.maxEndpointsPerSlice)) -}}
{{- end -}}
{{- if not (kindIs "invalid" .Values.concurrentSyncs) -}}
{{- $args = append $args (printf "--concurrent-syncs=%d" (int .Values.concurrentSyncs)) -}}
{{- end -}}
{{- with .Values.plugins -}}
{{- with .pollInterval -}}
{{- $args = append $args (printf "--plugin-poll-interval=%s" .) -}}
{{- end -}}
{{- with .default -}}
{{- $args = append $args (printf "--default-plugin=%s" .) -}}
{{- end -}}
{{- with .failurePolicy -}}
{{- $args = append $args (printf "--plugin-failure-policy=%s" (join "," .)) -}}
{{- end -}}
{{- with .deadline -}}
{{- $args = append $args (printf "--plugin-deadline=%s" .) -}}
{{- end -}}
{{- if not (kindIs "invalid" .memoryLimitMiB) -}}
{{- $args = append $args (printf "--plugin-memory-limit-mib=%d" (int .memoryLimitMiB)) -}}
{{- end -}}
{{- with .registryHTTP -}}
{{- $args = append $args (printf "--plugin-registry-http=%s" (join "," .)) -}}
{{- end -}}
{{- end -}}
{{- toYaml (concat $args .Values.extraArgs) -}}
{{- end -}}

{{/* Combinations the schema cannot refuse, refused with what to change. */}}
{{- define "nsc.validate" -}}
{{- $plugins := .Values.plugins -}}
{{- if and (eq $plugins.source "image") (not $plugins.image.reference) -}}
{{- fail "plugins.source is image: set plugins.image.reference to the plugin image (best by digest, @sha256:...)" -}}
{{- end -}}
{{- if and .Values.prober.enabled (not .Values.prober.networks) -}}
{{- fail "prober.enabled: set prober.networks to the networks it probes (<namespace>/<name> of NetworkAttachmentDefinitions), e.g. --set 'prober.networks={default/macvlan}'" -}}
{{- end -}}
{{- if and .Values.metrics.serviceMonitor.enabled (not .Values.metrics.service.enabled) -}}
{{- fail "metrics.serviceMonitor.enabled needs metrics.service.enabled: the ServiceMonitor selects the metrics Service" -}}
{{- end -}}
{{- end -}}

{{/*
A file of files/ (a link into deploy/monitoring/, the one copy), refused when missing or empty.
*/}}
{{- define "nsc.file" -}}
{{- $content := .ctx.Files.Get .path -}}
{{- if not (trim $content) -}}
{{- fail (printf "%s is missing or empty in the chart: it links to deploy/monitoring/%s, which must exist (%s)" .path (base .path) .value) -}}
{{- end -}}
{{- $content -}}
{{- end -}}

{{/* What the controller writes: in the ClusterRole, or in the Role of watchNamespace. */}}
{{- define "nsc.namespacedRules" -}}
# Owned: the Services' EndpointSlices. Watched; created, updated at the version seen;
# orphans deleted.
- apiGroups: [discovery.k8s.io]
  resources: [endpointslices]
  verbs: [list, watch, create, update, delete]
# Warnings on the Services it cannot serve (invalid Service, plugin failures).
- apiGroups: [events.k8s.io]
  resources: [events]
  verbs: [create, patch]
{{- end -}}
