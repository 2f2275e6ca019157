{{/* Names and labels (the usual Helm conventions). */}}
{{- define "cardstream.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "cardstream.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "cardstream.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "cardstream.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: cardstream
{{- end }}

{{/* Selector labels of one component: include with (dict "ctx" $ "component" "worker"). */}}
{{- define "cardstream.selectorLabels" -}}
app.kubernetes.io/name: {{ include "cardstream.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "cardstream.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "cardstream.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "cardstream.image" -}}
{{- $tag := default (printf "%s-%s" .Chart.AppVersion .Values.image.variant) .Values.image.tag }}
{{- printf "%s:%s" .Values.image.repository $tag }}
{{- end }}

{{/* Inference device: worker.device, else cuda for the gpu image and cpu for the cpu image. */}}
{{- define "cardstream.device" -}}
{{- if .Values.worker.device }}{{ .Values.worker.device }}{{ else if eq .Values.image.variant "gpu" }}cuda{{ else }}cpu{{ end }}
{{- end }}

{{/* Non-secret settings as CARDSTREAM_* variables: the ConfigMap's data and the init Job's env. */}}
{{- define "cardstream.settings" -}}
CARDSTREAM_KAFKA__BOOTSTRAP_SERVERS: {{ .Values.kafka.bootstrapServers | quote }}
CARDSTREAM_KAFKA__UPLOADS_TOPIC: {{ .Values.kafka.uploadsTopic | quote }}
CARDSTREAM_KAFKA__RESULTS_TOPIC: {{ .Values.kafka.resultsTopic | quote }}
CARDSTREAM_KAFKA__DLQ_TOPIC: {{ .Values.kafka.dlqTopic | quote }}
CARDSTREAM_KAFKA__GROUP_ID: {{ .Values.kafka.groupId | quote }}
CARDSTREAM_KAFKA__TRANSACTIONAL_ID_PREFIX: {{ .Values.kafka.transactionalIdPrefix | quote }}
CARDSTREAM_KAFKA__TOPICS__UPLOADS_PARTITIONS: {{ .Values.kafka.uploadsPartitions | quote }}
{{- with .Values.kafka.config }}
CARDSTREAM_KAFKA__CONFIG: {{ toJson . | quote }}
{{- end }}
CARDSTREAM_S3__ENDPOINT: {{ .Values.s3.endpoint | quote }}
CARDSTREAM_S3__SECURE: {{ .Values.s3.secure | quote }}
CARDSTREAM_S3__REGION: {{ .Values.s3.region | quote }}
CARDSTREAM_S3__UPLOADS_BUCKET: {{ .Values.s3.uploadsBucket | quote }}
CARDSTREAM_S3__RESULTS_BUCKET: {{ .Values.s3.resultsBucket | quote }}
CARDSTREAM_S3__ALLOWED_BUCKETS: {{ list .Values.s3.uploadsBucket | toJson | quote }}
CARDSTREAM_S3__SSE: {{ .Values.s3.sse | quote }}
CARDSTREAM_WORKER__MAX_BATCH: {{ .Values.worker.maxBatch | quote }}
CARDSTREAM_WORKER__MAX_WAIT_MS: {{ .Values.worker.maxWaitMs | quote }}
CARDSTREAM_WORKER__HTTP_PORT: {{ .Values.worker.httpPort | quote }}
CARDSTREAM_RUNTIME__DEVICE: {{ include "cardstream.device" . | quote }}
CARDSTREAM_LOG_LEVEL: {{ .Values.worker.logLevel | quote }}
{{- end }}

{{/* Credentials from existing Secrets (never rendered into the chart). */}}
{{- define "cardstream.secretEnv" -}}
- name: CARDSTREAM_S3__ACCESS_KEY
  valueFrom:
    secretKeyRef:
      name: {{ .Values.s3.existingSecret }}
      key: {{ .Values.s3.accessKeyKey }}
- name: CARDSTREAM_S3__SECRET_KEY
  valueFrom:
    secretKeyRef:
      name: {{ .Values.s3.existingSecret }}
      key: {{ .Values.s3.secretKeyKey }}
{{- if .Values.kafka.existingSecret }}
- name: CARDSTREAM_KAFKA__SASL_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ .Values.kafka.existingSecret }}
      key: {{ .Values.kafka.saslPasswordKey }}
{{- end }}
{{- end }}

{{/* Writable scratch for a read-only root filesystem (numba/matplotlib caches, faust data). */}}
{{- define "cardstream.scratchEnv" -}}
- name: HOME
  value: /tmp
- name: NUMBA_CACHE_DIR
  value: /tmp/numba
- name: MPLCONFIGDIR
  value: /tmp/matplotlib
{{- end }}

{{/*
Checks that cannot be said in values.schema.json because they relate two values. A worker beyond
the uploads topic's partition count gets no partition: it holds a GPU and does nothing.
*/}}
{{- define "cardstream.validate" -}}
{{- $parts := int .Values.kafka.uploadsPartitions }}
{{- if .Values.autoscaling.enabled }}
{{- if gt (int .Values.autoscaling.maxReplicaCount) $parts }}
{{- fail (printf "autoscaling.maxReplicaCount (%d) must be <= kafka.uploadsPartitions (%d): a worker beyond the partition count gets no partition" (int .Values.autoscaling.maxReplicaCount) $parts) }}
{{- end }}
{{- if gt (int .Values.autoscaling.minReplicaCount) (int .Values.autoscaling.maxReplicaCount) }}
{{- fail (printf "autoscaling.minReplicaCount (%d) must be <= autoscaling.maxReplicaCount (%d)" (int .Values.autoscaling.minReplicaCount) (int .Values.autoscaling.maxReplicaCount)) }}
{{- end }}
{{- else if gt (int .Values.worker.replicas) $parts }}
{{- fail (printf "worker.replicas (%d) must be <= kafka.uploadsPartitions (%d): a worker beyond the partition count gets no partition" (int .Values.worker.replicas) $parts) }}
{{- end }}
{{- if and .Values.worker.gpu.enabled (eq (include "cardstream.device" .) "cpu") }}
{{- fail "worker.gpu.enabled requests a GPU but the device is cpu: set worker.device=cuda (or auto), or worker.gpu.enabled=false (values-cpu.yaml)" }}
{{- end }}
{{- if and (not .Values.worker.gpu.enabled) (eq (include "cardstream.device" .) "cuda") }}
{{- fail "worker.device is cuda but worker.gpu.enabled is false: the pod would get no GPU and the worker refuses to start" }}
{{- end }}
{{- end }}

{{/* imagePullSecrets of the pod spec (top level). */}}
{{- define "cardstream.imagePullSecrets" -}}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/* nodeSelector / tolerations / affinity of a pod spec, from a values section (worker, statusApp). */}}
{{- define "cardstream.scheduling" -}}
{{- with .nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}
