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

{{/* Where the Secrets with certificates are mounted (cardstream.tlsVolumes / tlsMounts). */}}
{{- define "cardstream.kafkaCaDir" -}}/etc/cardstream/kafka-ca{{- end }}
{{- define "cardstream.kafkaClientDir" -}}/etc/cardstream/kafka-client{{- end }}
{{- define "cardstream.s3CaDir" -}}/etc/cardstream/s3-ca{{- end }}

{{/* Non-secret settings as CARDSTREAM_* variables: the ConfigMap's data and the init Job's env.
Paths of mounted certificates are settings too; the files come from Secrets. */}}
{{- define "cardstream.settings" -}}
CARDSTREAM_KAFKA__BOOTSTRAP_SERVERS: {{ .Values.kafka.bootstrapServers | quote }}
CARDSTREAM_KAFKA__UPLOADS_TOPIC: {{ .Values.kafka.uploadsTopic | quote }}
CARDSTREAM_KAFKA__RESULTS_TOPIC: {{ .Values.kafka.resultsTopic | quote }}
CARDSTREAM_KAFKA__DLQ_TOPIC: {{ .Values.kafka.dlqTopic | quote }}
CARDSTREAM_KAFKA__GROUP_ID: {{ .Values.kafka.groupId | quote }}
CARDSTREAM_KAFKA__TRANSACTIONAL_ID_PREFIX: {{ .Values.kafka.transactionalIdPrefix | quote }}
CARDSTREAM_KAFKA__TOPICS__UPLOADS_PARTITIONS: {{ .Values.kafka.uploadsPartitions | quote }}
CARDSTREAM_KAFKA__SECURITY_PROTOCOL: {{ .Values.kafka.securityProtocol | quote }}
{{- if hasPrefix "SASL_" .Values.kafka.securityProtocol }}
CARDSTREAM_KAFKA__SASL_MECHANISM: {{ .Values.kafka.sasl.mechanism | quote }}
CARDSTREAM_KAFKA__SASL_USERNAME: {{ .Values.kafka.sasl.username | quote }}
{{- end }}
{{- if .Values.kafka.tls.caSecret }}
CARDSTREAM_KAFKA__CA_FILE: {{ printf "%s/ca.crt" (include "cardstream.kafkaCaDir" .) | quote }}
{{- end }}
{{- if .Values.kafka.tls.clientSecret }}
CARDSTREAM_KAFKA__CERT_FILE: {{ printf "%s/tls.crt" (include "cardstream.kafkaClientDir" .) | quote }}
CARDSTREAM_KAFKA__KEY_FILE: {{ printf "%s/tls.key" (include "cardstream.kafkaClientDir" .) | quote }}
{{- end }}
{{- with .Values.kafka.config }}
CARDSTREAM_KAFKA__CONFIG: {{ toJson . | quote }}
{{- end }}
CARDSTREAM_S3__ENDPOINT: {{ .Values.s3.endpoint | quote }}
CARDSTREAM_S3__SECURE: {{ .Values.s3.secure | quote }}
{{- if .Values.s3.tls.caSecret }}
CARDSTREAM_S3__CA_FILE: {{ printf "%s/ca.crt" (include "cardstream.s3CaDir" .) | quote }}
{{- end }}
CARDSTREAM_S3__REGION: {{ .Values.s3.region | quote }}
CARDSTREAM_S3__UPLOADS_BUCKET: {{ .Values.s3.uploadsBucket | quote }}
CARDSTREAM_S3__RESULTS_BUCKET: {{ .Values.s3.resultsBucket | quote }}
CARDSTREAM_S3__QUARANTINE_BUCKET: {{ .Values.s3.quarantineBucket | quote }}
CARDSTREAM_S3__ALLOWED_BUCKETS: {{ list .Values.s3.uploadsBucket | toJson | quote }}
CARDSTREAM_S3__SSE: {{ .Values.s3.sse | quote }}
CARDSTREAM_S3__UPLOADS_EXPIRY_DAYS: {{ .Values.s3.expiryDays.uploads | quote }}
CARDSTREAM_S3__RESULTS_EXPIRY_DAYS: {{ .Values.s3.expiryDays.results | quote }}
CARDSTREAM_S3__QUARANTINE_EXPIRY_DAYS: {{ .Values.s3.expiryDays.quarantine | quote }}
CARDSTREAM_WORKER__MAX_BATCH: {{ .Values.worker.maxBatch | quote }}
CARDSTREAM_WORKER__MAX_WAIT_MS: {{ .Values.worker.maxWaitMs | quote }}
CARDSTREAM_WORKER__HTTP_PORT: {{ .Values.worker.httpPort | quote }}
CARDSTREAM_RUNTIME__DEVICE: {{ include "cardstream.device" . | quote }}
CARDSTREAM_LOG_LEVEL: {{ .Values.worker.logLevel | quote }}
{{- end }}

{{/* A variable from a key of an existing Secret: (dict "name" ENV "secret" NAME "key" KEY). */}}
{{- define "cardstream.secretRef" -}}
- name: {{ .name }}
  valueFrom:
    secretKeyRef:
      name: {{ .secret }}
      key: {{ .key }}
{{- end }}

{{/* The SASL password from its Secret (every Kafka client: workers, status app, init job). */}}
{{- define "cardstream.kafkaSecretEnv" -}}
{{- if .Values.kafka.existingSecret }}
{{ include "cardstream.secretRef" (dict "name" "CARDSTREAM_KAFKA__SASL_PASSWORD" "secret" .Values.kafka.existingSecret "key" .Values.kafka.saslPasswordKey) }}
{{- end }}
{{- end }}

{{/* S3 credentials from an existing Secret as PREFIX__ACCESS_KEY / PREFIX__SECRET_KEY:
(dict "ctx" $ "secret" NAME "prefix" "CARDSTREAM_S3"). */}}
{{- define "cardstream.s3CredentialEnv" -}}
{{ include "cardstream.secretRef" (dict "name" (printf "%s__ACCESS_KEY" .prefix) "secret" .secret "key" .ctx.Values.s3.accessKeyKey) }}
{{ include "cardstream.secretRef" (dict "name" (printf "%s__SECRET_KEY" .prefix) "secret" .secret "key" .ctx.Values.s3.secretKeyKey) }}
{{- end }}

{{/* The workers' credentials (the worker role) and the SASL password. */}}
{{- define "cardstream.secretEnv" -}}
{{ include "cardstream.s3CredentialEnv" (dict "ctx" . "secret" .Values.s3.existingSecret "prefix" "CARDSTREAM_S3") }}
{{- include "cardstream.kafkaSecretEnv" . }}
{{- end }}

{{/* The init job's credentials: the object store's admin, and the users to create per role. */}}
{{- define "cardstream.initSecretEnv" -}}
{{ include "cardstream.s3CredentialEnv" (dict "ctx" . "secret" .Values.s3.adminSecret "prefix" "CARDSTREAM_S3") }}
{{ include "cardstream.s3CredentialEnv" (dict "ctx" . "secret" .Values.s3.existingSecret "prefix" "CARDSTREAM_S3__ROLES__WORKER") }}
{{- with .Values.s3.roles.producerSecret }}
{{ include "cardstream.s3CredentialEnv" (dict "ctx" $ "secret" . "prefix" "CARDSTREAM_S3__ROLES__PRODUCER") }}
{{- end }}
{{- with .Values.s3.roles.ocrSecret }}
{{ include "cardstream.s3CredentialEnv" (dict "ctx" $ "secret" . "prefix" "CARDSTREAM_S3__ROLES__OCR") }}
{{- end }}
{{- with (include "cardstream.gatewayS3Secret" .) }}
{{ include "cardstream.s3CredentialEnv" (dict "ctx" $ "secret" . "prefix" "CARDSTREAM_S3__ROLES__GATEWAY") }}
{{- end }}
{{- include "cardstream.kafkaSecretEnv" . }}
{{- end }}

{{/* The Secret of the gateway role's user: s3.roles.gatewaySecret, else gateway.s3Secret when the
gateway is enabled, else none. */}}
{{- define "cardstream.gatewayS3Secret" -}}
{{- if .Values.s3.roles.gatewaySecret }}{{ .Values.s3.roles.gatewaySecret }}{{ else if .Values.gateway.enabled }}{{ .Values.gateway.s3Secret }}{{ end }}
{{- end }}

{{/* Volumes with the certificates from Secrets: (dict "ctx" $ "s3" true|false). */}}
{{- define "cardstream.tlsVolumes" -}}
{{- $v := .ctx.Values }}
{{- with $v.kafka.tls.caSecret }}
- name: kafka-ca
  secret:
    secretName: {{ . }}
    defaultMode: 0444
    items:
      - key: {{ $v.kafka.tls.caKey }}
        path: ca.crt
{{- end }}
{{- with $v.kafka.tls.clientSecret }}
- name: kafka-client
  secret:
    secretName: {{ . }}
    defaultMode: 0440
    items:
      - key: tls.crt
        path: tls.crt
      - key: tls.key
        path: tls.key
{{- end }}
{{- if and .s3 $v.s3.tls.caSecret }}
- name: s3-ca
  secret:
    secretName: {{ $v.s3.tls.caSecret }}
    defaultMode: 0444
    items:
      - key: {{ $v.s3.tls.caKey }}
        path: ca.crt
{{- end }}
{{- end }}

{{/* Their mounts, read-only: (dict "ctx" $ "s3" true|false). */}}
{{- define "cardstream.tlsMounts" -}}
{{- $v := .ctx.Values }}
{{- if $v.kafka.tls.caSecret }}
- name: kafka-ca
  mountPath: {{ include "cardstream.kafkaCaDir" .ctx }}
  readOnly: true
{{- end }}
{{- if $v.kafka.tls.clientSecret }}
- name: kafka-client
  mountPath: {{ include "cardstream.kafkaClientDir" .ctx }}
  readOnly: true
{{- end }}
{{- if and .s3 $v.s3.tls.caSecret }}
- name: s3-ca
  mountPath: {{ include "cardstream.s3CaDir" .ctx }}
  readOnly: true
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
{{- if and (hasPrefix "SASL_" .Values.kafka.securityProtocol) (not .Values.kafka.existingSecret) }}
{{- fail (printf "kafka.securityProtocol %s needs kafka.existingSecret (the Secret with the SASL password)" .Values.kafka.securityProtocol) }}
{{- end }}
{{- if and .Values.statusApp.enabled (not .Values.statusApp.existingSecret) }}
{{- fail "statusApp.existingSecret is required: the Secret with the status API's bearer token (the app listens on the pod network)" }}
{{- end }}
{{- if and .Values.gateway.enabled (or (not .Values.gateway.apiKeysSecret) (not .Values.gateway.s3Secret)) }}
{{- fail "gateway.apiKeysSecret and gateway.s3Secret are required: the Secrets with the clients' API keys and the gateway role's S3 credentials" }}
{{- end }}
{{- if and .Values.gateway.enabled .Values.gateway.autoscaling.enabled (gt (int .Values.gateway.autoscaling.minReplicas) (int .Values.gateway.autoscaling.maxReplicas)) }}
{{- fail (printf "gateway.autoscaling.minReplicas (%d) must be <= gateway.autoscaling.maxReplicas (%d)" (int .Values.gateway.autoscaling.minReplicas) (int .Values.gateway.autoscaling.maxReplicas)) }}
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

{{/* nodeSelector / tolerations / affinity of a pod spec, from a values section (worker, statusApp, gateway). */}}
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

{{/* One egress rule of a NetworkPolicy from (dict "ports" [...] "to" [...]): TCP to those ports,
to the peers in "to" or, when it is empty, to any destination. */}}
{{- define "cardstream.egressRule" -}}
- ports:
    {{- range .ports }}
    - port: {{ . }}
      protocol: TCP
    {{- end }}
  {{- with .to }}
  to:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end }}
