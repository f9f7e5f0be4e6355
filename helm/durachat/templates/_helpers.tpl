{{/* Names, labels and the pieces every durachat container shares. */}}

{{- define "durachat.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "durachat.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "durachat.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Selector labels of one component: (dict "ctx" $ "component" "gateway") */}}
{{- define "durachat.selectorLabels" -}}
app.kubernetes.io/name: {{ include "durachat.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "durachat.labels" -}}
helm.sh/chart: {{ include "durachat.chart" .ctx }}
{{ include "durachat.selectorLabels" . }}
app.kubernetes.io/version: {{ .ctx.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .ctx.Release.Service }}
app.kubernetes.io/part-of: durachat
{{- end -}}

{{- define "durachat.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{- define "durachat.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "durachat.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* Secret and key of each credential: the user's existing Secret or the chart's own. */}}
{{- define "durachat.authSecret" -}}
{{- default (include "durachat.fullname" .) .Values.auth.existingSecret -}}
{{- end -}}

{{- define "durachat.databaseSecret" -}}
{{- default (include "durachat.fullname" .) .Values.database.existingSecret -}}
{{- end -}}

{{- define "durachat.databaseSecretKey" -}}
{{- if .Values.database.existingSecret -}}{{ .Values.database.existingSecretKey }}{{- else -}}DATABASE_URL{{- end -}}
{{- end -}}

{{- define "durachat.redisSecret" -}}
{{- default (include "durachat.fullname" .) .Values.redis.existingSecret -}}
{{- end -}}

{{- define "durachat.redisSecretKey" -}}
{{- if .Values.redis.existingSecret -}}{{ .Values.redis.existingSecretKey }}{{- else -}}REDIS_URL{{- end -}}
{{- end -}}

{{- define "durachat.validate" -}}
{{- if not (or .Values.database.url .Values.database.existingSecret .Values.inClusterPostgresql.enabled) -}}
{{- fail "set database.url, database.existingSecret or inClusterPostgresql.enabled" -}}
{{- end -}}
{{- if not (or .Values.redis.url .Values.redis.existingSecret .Values.inClusterRedis.enabled) -}}
{{- fail "set redis.url, redis.existingSecret or inClusterRedis.enabled" -}}
{{- end -}}
{{- if and .Values.redis.clusterNodes .Values.inClusterRedis.enabled -}}
{{- fail "redis.clusterNodes needs inClusterRedis.enabled=false and redis.url or redis.existingSecret" -}}
{{- end -}}
{{- if le (int .Values.shard.terminationGracePeriodSeconds) (add (int .Values.shard.drainTimeoutSeconds) 5) -}}
{{- fail "shard.terminationGracePeriodSeconds must exceed shard.drainTimeoutSeconds by more than 5 seconds, or Kubernetes kills shards while they drain" -}}
{{- end -}}
{{- end -}}

{{/* The environment every durachat container gets: ConfigMap, credentials, extras. */}}
{{- define "durachat.envFrom" -}}
- configMapRef:
    name: {{ include "durachat.fullname" . }}
{{- with .Values.extraEnvFrom }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "durachat.credentialsEnv" -}}
- name: REDIS_URL
  valueFrom:
    secretKeyRef:
      name: {{ include "durachat.redisSecret" . }}
      key: {{ include "durachat.redisSecretKey" . }}
- name: DATABASE_URL
  valueFrom:
    secretKeyRef:
      name: {{ include "durachat.databaseSecret" . }}
      key: {{ include "durachat.databaseSecretKey" . }}
- name: DURACHAT_ADMIN_KEY
  valueFrom:
    secretKeyRef:
      name: {{ include "durachat.authSecret" . }}
      key: {{ if .Values.auth.existingSecret }}{{ .Values.auth.existingSecretKeys.adminKey }}{{ else }}DURACHAT_ADMIN_KEY{{ end }}
- name: DURACHAT_CLUSTER_SECRET
  valueFrom:
    secretKeyRef:
      name: {{ include "durachat.authSecret" . }}
      key: {{ if .Values.auth.existingSecret }}{{ .Values.auth.existingSecretKeys.clusterSecret }}{{ else }}DURACHAT_CLUSTER_SECRET{{ end }}
{{- end -}}

{{/* A component's own extra variables: (dict "env" .Values.gateway.env) */}}
{{- define "durachat.extraEnv" -}}
{{- range $name, $value := .env }}
- name: {{ $name }}
  value: {{ $value | toString | quote }}
{{- end }}
{{- end -}}

{{/* Default spreading over nodes and zones: (dict "ctx" $ "component" "shard" "custom" list) */}}
{{- define "durachat.topologySpread" -}}
{{- if .custom -}}
{{ toYaml .custom }}
{{- else -}}
- maxSkew: 1
  topologyKey: kubernetes.io/hostname
  whenUnsatisfiable: ScheduleAnyway
  labelSelector:
    matchLabels:
      {{- include "durachat.selectorLabels" (dict "ctx" .ctx "component" .component) | nindent 6 }}
- maxSkew: 1
  topologyKey: topology.kubernetes.io/zone
  whenUnsatisfiable: ScheduleAnyway
  labelSelector:
    matchLabels:
      {{- include "durachat.selectorLabels" (dict "ctx" .ctx "component" .component) | nindent 6 }}
{{- end -}}
{{- end -}}

{{/* Pod annotations: config checksums (restart on change) and Prometheus scraping. */}}
{{- define "durachat.podAnnotations" -}}
checksum/config: {{ include (print .ctx.Template.BasePath "/configmap.yaml") .ctx | sha256sum }}
{{- if .ctx.Values.metrics.podAnnotations }}
prometheus.io/scrape: "true"
prometheus.io/port: {{ .port | quote }}
prometheus.io/path: /metrics
{{- end }}
{{- with .extra }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* Probes on a component's port: (dict "port" "http") */}}
{{- define "durachat.probes" -}}
startupProbe:
  httpGet: {path: /healthz, port: {{ .port }}}
  periodSeconds: 2
  failureThreshold: 60
livenessProbe:
  httpGet: {path: /healthz, port: {{ .port }}}
  periodSeconds: 10
  timeoutSeconds: 3
  failureThreshold: 3
readinessProbe:
  httpGet: {path: /readyz, port: {{ .port }}}
  periodSeconds: 5
  timeoutSeconds: 3
  failureThreshold: 2
{{- end -}}
