{{/* Multi-node mode (multiNode.enabled): a LeaderWorkerSet of Ray nodes. */}}

{{/* Container resources with `gpus` GPUs added: (list $ <resources>). */}}
{{- define "tvg.resourcesWithGpus" -}}
{{- $root := index . 0 }}
{{- $resources := deepCopy (index . 1 | default dict) }}
{{- if gt (int $root.Values.gpus) 0 }}
{{- $gpu := dict $root.Values.gpuResourceName (int $root.Values.gpus) }}
{{- $_ := set $resources "limits" (merge (get $resources "limits" | default dict) $gpu) }}
{{- $_ := set $resources "requests" (merge (get $resources "requests" | default dict) $gpu) }}
{{- end }}
{{- toYaml $resources }}
{{- end }}

{{/* Options of `ray start` shared by the head and the workers. */}}
{{- define "tvg.rayStartOptions" -}}
--node-ip-address="$POD_IP" --num-gpus={{ int .Values.gpus }} --disable-usage-stats
{{- range .Values.multiNode.rayStartArgs }} {{ . }}{{ end }}
{{- end }}

{{/* The leader: the Ray head in the background, then the server in the foreground (tini
     passes SIGTERM to it for its drain). */}}
{{- define "tvg.leaderCommand" -}}
ray start --head --port={{ .Values.multiNode.rayPort }} --dashboard-host=0.0.0.0
{{- printf " --dashboard-port=%v " .Values.multiNode.rayDashboardPort }}
{{- include "tvg.rayStartOptions" . }} && exec python -m app
{{- end }}

{{/* A worker: wait for the leader's Ray head, then run a Ray node until it stops. */}}
{{- define "tvg.workerCommand" -}}
{{- $head := printf "$LWS_LEADER_ADDRESS:%v" .Values.multiNode.rayPort -}}
until ray status --address="{{ $head }}" >/dev/null 2>&1; do echo "waiting for the Ray head at {{ $head }}"; sleep 5; done;
{{- printf " exec ray start --address=%q --block " $head }}
{{- include "tvg.rayStartOptions" . }}
{{- end }}

{{/* Env entries every pod of a group needs: its own IP (its Ray node address). */}}
{{- define "tvg.podIpEnv" -}}
- name: POD_IP
  valueFrom:
    fieldRef:
      fieldPath: status.podIP
{{- end }}

{{/* Refuse multi-node values that cannot form a working group. */}}
{{- define "tvg.validateMultiNode" -}}
{{- $size := int .Values.multiNode.size }}
{{- $gpus := int .Values.gpus }}
{{- if lt $size 2 }}
{{- fail (printf "multiNode.size (%d) must be at least 2 (one pod: use the Deployment)" $size) }}
{{- end }}
{{- if lt $gpus 1 }}
{{- fail "multiNode needs gpus per pod: vLLM's Ray executor places one worker on each GPU" }}
{{- end }}
{{- if ne .Values.image.variant "gpu" }}
{{- fail "multiNode needs image.variant gpu: the CPU image carries no Ray" }}
{{- end }}
{{- if not (has .Values.multiNode.restartPolicy (list "RecreateGroupOnPodRestart" "None")) }}
{{- fail (printf "multiNode.restartPolicy must be RecreateGroupOnPodRestart or None, not %q" .Values.multiNode.restartPolicy) }}
{{- end }}
{{- range .Values.modelRepository.models }}
{{- if ne (toString .modelJson.distributed_executor_backend) "ray" }}
{{- fail (printf "model %s: multiNode needs distributed_executor_backend: ray in modelJson" .name) }}
{{- end }}
{{- $devices := mul (int (.modelJson.tensor_parallel_size | default 1)) (int (.modelJson.pipeline_parallel_size | default 1)) }}
{{- if gt $devices (mul $size $gpus) }}
{{- fail (printf "model %s: tensor_parallel_size x pipeline_parallel_size = %d needs more than multiNode.size x gpus = %d" .name $devices (mul $size $gpus)) }}
{{- end }}
{{- end }}
{{- end }}

{{/* Pod-level settings shared by leader and worker pods. */}}
{{- define "tvg.multiNodePodSettings" -}}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
serviceAccountName: {{ include "tvg.serviceAccountName" . }}
{{- with .Values.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- with .Values.runtimeClassName }}
runtimeClassName: {{ . }}
{{- end }}
terminationGracePeriodSeconds: {{ .Values.terminationGracePeriodSeconds }}
{{- with .Values.podSecurityContext }}
securityContext:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/* Mounts of every pod of a group: weights (each Ray worker loads its shard), caches,
     /dev/shm, extras. */}}
{{- define "tvg.multiNodeMounts" -}}
{{- if ne .Values.weights.source "none" }}
- name: weights
  mountPath: {{ .Values.weights.mountPath }}
  readOnly: true
{{- end }}
- name: cache
  mountPath: {{ .Values.cache.mountPath }}
{{- if .Values.shm.enabled }}
- name: dshm
  mountPath: /dev/shm
{{- end }}
{{- with .Values.extraVolumeMounts }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* The volumes behind tvg.multiNodeMounts. */}}
{{- define "tvg.multiNodeVolumes" -}}
{{- if eq .Values.weights.source "pvc" }}
- name: weights
  persistentVolumeClaim:
    claimName: {{ include "tvg.weightsClaim" . }}
    readOnly: true
{{- else if eq .Values.weights.source "hostPath" }}
- name: weights
  hostPath:
    path: {{ .Values.weights.hostPath.path }}
    type: {{ .Values.weights.hostPath.type }}
{{- end }}
- name: cache
  {{- if .Values.cache.existingClaim }}
  persistentVolumeClaim:
    claimName: {{ .Values.cache.existingClaim }}
  {{- else }}
  emptyDir:
    sizeLimit: {{ .Values.cache.sizeLimit }}
  {{- end }}
{{- if .Values.shm.enabled }}
- name: dshm
  emptyDir:
    medium: Memory
    sizeLimit: {{ .Values.shm.sizeLimit }}
{{- end }}
{{- with .Values.extraVolumes }}
{{ toYaml . }}
{{- end }}
{{- end }}
