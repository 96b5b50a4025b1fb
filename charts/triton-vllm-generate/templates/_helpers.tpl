{{/* Chart name, possibly overridden. */}}
{{- define "tvg.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Resource name: the release name, with the chart name unless it already holds it. */}}
{{- define "tvg.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else if contains (include "tvg.name" .) .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name (include "tvg.name" .) | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}

{{- define "tvg.selectorLabels" -}}
app.kubernetes.io/name: {{ include "tvg.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "tvg.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "tvg.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "tvg.image" -}}
{{- $tag := .Values.image.tag | default (printf "%s-%s" .Chart.AppVersion .Values.image.variant) }}
{{- printf "%s:%s" .Values.image.repository $tag }}
{{- end }}

{{- define "tvg.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "tvg.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The Secret with the API keys, or "" when authentication is off. */}}
{{- define "tvg.apiKeysSecret" -}}
{{- if .Values.apiKeys.existingSecret }}
{{- .Values.apiKeys.existingSecret }}
{{- else if .Values.apiKeys.keys }}
{{- printf "%s-api-keys" (include "tvg.fullname" .) }}
{{- end }}
{{- end }}

{{- define "tvg.weightsClaim" -}}
{{- .Values.weights.pvc.claimName | default (printf "%s-weights" (include "tvg.fullname" .)) }}
{{- end }}

{{/* Port name the metrics are scraped from: its own port, or the main one. */}}
{{- define "tvg.metricsTargetPort" -}}
{{- if .Values.server.metricsPort }}metrics{{ else }}http{{ end }}
{{- end }}

{{/* ConfigMap keys cannot hold "/": "<model>.config.pbtxt", "<model>.<version>.model.json". */}}
{{- define "tvg.modelRepositoryItems" -}}
{{- range .Values.modelRepository.models }}
{{- if .config }}
- key: {{ .name }}.config.pbtxt
  path: {{ .name }}/config.pbtxt
{{- end }}
- key: {{ .name }}.{{ .version }}.model.json
  path: {{ .name }}/{{ .version }}/model.json
{{- if .multiLora }}
- key: {{ .name }}.{{ .version }}.multi_lora.json
  path: {{ .name }}/{{ .version }}/multi_lora.json
{{- end }}
{{- end }}
{{- end }}

{{/* Refuse values that would deploy a pod that cannot work. */}}
{{- define "tvg.validate" -}}
{{- $drain := int .Values.server.drainTimeoutSeconds }}
{{- $grace := int .Values.terminationGracePeriodSeconds }}
{{- $preStop := int .Values.preStopSleepSeconds }}
{{- if le $grace (add $drain $preStop) }}
{{- fail (printf "terminationGracePeriodSeconds (%d) must exceed preStopSleepSeconds + server.drainTimeoutSeconds (%d + %d)" $grace $preStop $drain) }}
{{- end }}
{{- if not (has .Values.weights.source (list "none" "pvc" "hostPath")) }}
{{- fail (printf "weights.source must be none, pvc or hostPath, not %q" .Values.weights.source) }}
{{- end }}
{{- if not .Values.modelRepository.models }}
{{- fail "modelRepository.models is empty: the server needs at least one model" }}
{{- end }}
{{- $gpus := int .Values.gpus }}
{{- range .Values.modelRepository.models }}
{{- if not (and .name .version .modelJson) }}
{{- fail "each entry of modelRepository.models needs name, version and modelJson" }}
{{- end }}
{{- if not .modelJson.model }}
{{- fail (printf "model %s: modelJson.model (the weights) is missing" .name) }}
{{- end }}
{{- $tp := int (.modelJson.tensor_parallel_size | default 1) }}
{{- $pp := int (.modelJson.pipeline_parallel_size | default 1) }}
{{- if and (gt $gpus 0) (ne (toString .modelJson.distributed_executor_backend) "ray") (gt (mul $tp $pp) $gpus) }}
{{- fail (printf "model %s: tensor_parallel_size x pipeline_parallel_size = %d needs more than gpus = %d" .name (mul $tp $pp) $gpus) }}
{{- end }}
{{- end }}
{{- end }}

{{/* The server container's environment: every setting the values give (Deployment and the
LeaderWorkerSet's leader). */}}
{{- define "tvg.serverEnv" -}}
- name: HOST
  value: "0.0.0.0"
- name: PORT
  value: {{ .Values.server.port | quote }}
- name: GRPC_PORT
  value: {{ .Values.server.grpcPort | default 0 | quote }}
{{- if .Values.server.metricsPort }}
- name: METRICS_PORT
  value: {{ .Values.server.metricsPort | quote }}
{{- end }}
- name: MODEL_REPOSITORY
  value: {{ .Values.modelRepository.mountPath | quote }}
{{- with .Values.server.models }}
- name: MODELS
  value: {{ toJson . | quote }}
{{- end }}
- name: LOG_LEVEL
  value: {{ .Values.server.logLevel | quote }}
- name: DRAIN_TIMEOUT_SECONDS
  value: {{ .Values.server.drainTimeoutSeconds | quote }}
{{- if not (kindIs "invalid" .Values.server.maxPendingRequests) }}
- name: MAX_PENDING_REQUESTS
  value: {{ .Values.server.maxPendingRequests | quote }}
{{- end }}
- name: CPU_KVCACHE_SPACE_GIB
  value: {{ .Values.server.cpuKvcacheSpaceGiB | quote }}
{{- with .Values.server.engineRestart }}
- name: ENGINE_RESTART
  value: {{ .enabled | quote }}
- name: ENGINE_RESTART_MAX
  value: {{ .max | quote }}
- name: ENGINE_RESTART_WINDOW_SECONDS
  value: {{ .windowSeconds | quote }}
- name: ENGINE_RESTART_BACKOFF_SECONDS
  value: {{ .backoffSeconds | quote }}
- name: ENGINE_RESTART_BACKOFF_MAX_SECONDS
  value: {{ .backoffMaxSeconds | quote }}
- name: ENGINE_PROBE_INTERVAL_SECONDS
  value: {{ .probeIntervalSeconds | quote }}
- name: ENGINE_PROBE_TIMEOUT_SECONDS
  value: {{ .probeTimeoutSeconds | quote }}
{{- end }}
- name: RELOAD_IN_PLACE
  value: {{ .Values.server.reloadInPlace | quote }}
{{- with .Values.server.frontendProcesses }}
- name: FRONTEND_PROCESSES
  value: {{ . | quote }}
{{- end }}
{{- with include "tvg.apiKeysSecret" . }}
- name: API_KEYS
  valueFrom:
    secretKeyRef:
      name: {{ . }}
      key: {{ $.Values.apiKeys.secretKey }}
{{- end }}
{{- include "tvg.tlsEnv" . }}
{{- range $name, $value := .Values.settings }}
- name: {{ $name }}
  value: {{ if kindIs "slice" $value }}{{ toJson $value | quote }}{{ else }}{{ toString $value | quote }}{{ end }}
{{- end }}
{{- with .Values.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* TLS settings for the Secret mounted at /tls (values `tls`). */}}
{{- define "tvg.tlsEnv" -}}
{{- with .Values.tls }}
{{- if .secretName }}
{{- if .http }}
- name: HTTP_SSL_CERTFILE
  value: /tls/tls.crt
- name: HTTP_SSL_KEYFILE
  value: /tls/tls.key
{{- end }}
{{- if .grpc }}
- name: GRPC_USE_SSL
  value: "true"
- name: GRPC_SERVER_CERT
  value: /tls/tls.crt
- name: GRPC_SERVER_KEY
  value: /tls/tls.key
{{- if .grpcMutual }}
- name: GRPC_USE_SSL_MUTUAL
  value: "true"
- name: GRPC_ROOT_CERT
  value: /tls/ca.crt
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}

{{/* "HTTPS" when the HTTP port serves TLS: the probes' scheme. */}}
{{- define "tvg.httpsProbes" -}}
{{- if and .Values.tls.secretName .Values.tls.http }}true{{- end }}
{{- end }}

{{/* The server container's ports: http, grpc, metrics. */}}
{{- define "tvg.serverPorts" -}}
- name: http
  containerPort: {{ .Values.server.port }}
  protocol: TCP
{{- if .Values.server.grpcPort }}
- name: grpc
  containerPort: {{ .Values.server.grpcPort }}
  protocol: TCP
{{- end }}
{{- if .Values.server.metricsPort }}
- name: metrics
  containerPort: {{ .Values.server.metricsPort }}
  protocol: TCP
{{- end }}
{{- end }}
