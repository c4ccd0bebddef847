{{- define "q-a2a-gateway.fullname" -}}
{{ .Release.Name }}-q-a2a-gateway
{{- end }}

{{- define "q-a2a-gateway.selectorLabels" -}}
app.kubernetes.io/name: q-a2a-gateway
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "q-a2a-gateway.labels" -}}
{{ include "q-a2a-gateway.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version }}
{{- end }}

{{- define "q-a2a-gateway.probeScheme" -}}
{{- if .Values.gateway.tls.enabled }}HTTPS{{ else }}HTTP{{ end }}
{{- end }}

{{- define "q-a2a-gateway.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{/*
Credentials come from an existing Secret, never from values or the ConfigMap. One row per
variable: name, the secrets.keys entry naming the Secret's key, optional. A new credential is
one more row here and one more key in values.yaml (and values.schema.json).
*/}}
{{- define "q-a2a-gateway.secretVariables" -}}
- [Q_A2A_DATABASE_URL, databaseUrl, false]
- [Q_A2A_REDIS_URL, redisUrl, false]
- [Q_A2A_CREDENTIAL_KEYS, credentialKeys, false]
- [Q_A2A_CREDENTIAL_ACTIVE_KEY, credentialActiveKey, true]
- [Q_A2A_UPSTREAM_SERVICE_TOKEN, upstreamServiceToken, false]
{{- /* Every replica signs and checks ListTasks page tokens with the same key. */}}
- [Q_A2A_CURSOR_KEY, cursorKey, false]
{{- end }}

{{- define "q-a2a-gateway.secretEnv" -}}
{{- range $row := include "q-a2a-gateway.secretVariables" . | fromYamlArray }}
- name: {{ index $row 0 }}
  valueFrom:
    secretKeyRef:
      name: {{ $.Values.secrets.name }}
      key: {{ index $.Values.secrets.keys (index $row 1) }}
      {{- if index $row 2 }}
      optional: true
      {{- end }}
{{- end }}
{{- /* Tells the gateway it is one of several: it then refuses to start without that key. */}}
- name: Q_A2A_REPLICAS
  value: {{ .Values.replicaCount | quote }}
{{- end }}

{{/*
TLS to PostgreSQL: in the environment rather than gateway.toml, because the migration Job
(which has no ConfigMap) connects to the same database.
*/}}
{{- define "q-a2a-gateway.databaseTlsEnv" -}}
- name: Q_A2A_DATABASE_SSLMODE
  value: {{ .Values.database.sslmode | quote }}
{{- if .Values.database.caSecret.name }}
- name: Q_A2A_DATABASE_SSL_ROOT_CERT
  value: /etc/q-a2a-gateway/database-ca/{{ .Values.database.caSecret.key }}
{{- end }}
{{- with .Values.database.clientCertSecret }}
{{- if .name }}
- name: Q_A2A_DATABASE_SSL_CERT
  value: /etc/q-a2a-gateway/database-client/{{ .certKey }}
- name: Q_A2A_DATABASE_SSL_KEY
  value: /etc/q-a2a-gateway/database-client/{{ .keyKey }}
{{- end }}
{{- end }}
{{- end }}

{{- define "q-a2a-gateway.databaseTlsMount" -}}
{{- if .Values.database.caSecret.name }}
- name: database-ca
  mountPath: /etc/q-a2a-gateway/database-ca
  readOnly: true
{{- end }}
{{- if .Values.database.clientCertSecret.name }}
- name: database-client
  mountPath: /etc/q-a2a-gateway/database-client
  readOnly: true
{{- end }}
{{- end }}

{{- define "q-a2a-gateway.databaseTlsVolume" -}}
{{- if .Values.database.caSecret.name }}
- name: database-ca
  secret:
    secretName: {{ .Values.database.caSecret.name }}
    items:
      - key: {{ .Values.database.caSecret.key }}
        path: {{ .Values.database.caSecret.key }}
{{- end }}
{{- with .Values.database.clientCertSecret }}
{{- if .name }}
- name: database-client
  secret:
    secretName: {{ .name }}
    {{- /* The key readable by the pod's group (fsGroup) only. */}}
    defaultMode: 0440
    items:
      - key: {{ .certKey }}
        path: {{ .certKey }}
      - key: {{ .keyKey }}
        path: {{ .keyKey }}
{{- end }}
{{- end }}
{{- end }}

{{/* Q's CA applies in standalone mode only: the sidecar reaches Q over plain loopback. */}}
{{- define "q-a2a-gateway.upstreamCa" -}}
{{- if and (eq .Values.mode "standalone") .Values.upstream.caSecret.name }}true{{ end }}
{{- end }}

{{/* Standalone mode sends every caller's bearer token to Q: plain http only on purpose. */}}
{{- define "q-a2a-gateway.upstreamUrl" -}}
{{- if eq .Values.mode "sidecar" -}}
http://127.0.0.1:{{ .Values.qApi.internalPort }}
{{- else -}}
{{- if and (not (hasPrefix "https://" .Values.upstream.url)) (not .Values.upstream.allowInsecureUpstream) -}}
{{- fail (printf "upstream.url %q is not https://: in standalone mode every caller's bearer token crosses the network to Q's introspection. Use an https:// URL, or set upstream.allowInsecureUpstream: true to accept plain http on purpose" .Values.upstream.url) -}}
{{- end -}}
{{ .Values.upstream.url }}
{{- end -}}
{{- end }}

{{- define "q-a2a-gateway.container" -}}
- name: q-a2a-gateway
  image: {{ include "q-a2a-gateway.image" . | quote }}
  imagePullPolicy: {{ .Values.image.pullPolicy }}
  args: ["serve"]
  env:
    - name: Q_A2A_CONFIG
      value: /etc/q-a2a-gateway/config/gateway.toml
    - name: RUST_LOG
      value: {{ .Values.gateway.logFilter | quote }}
    {{- include "q-a2a-gateway.secretEnv" . | nindent 4 }}
    {{- include "q-a2a-gateway.databaseTlsEnv" . | nindent 4 }}
    {{- if .Values.redis.caSecret.name }}
    - name: Q_A2A_REDIS_TLS_CA_FILE
      value: /etc/q-a2a-gateway/redis-ca/{{ .Values.redis.caSecret.key }}
    {{- end }}
    {{- if include "q-a2a-gateway.upstreamCa" . }}
    - name: Q_A2A_UPSTREAM_TLS_CA_FILE
      value: /etc/q-a2a-gateway/upstream-ca/{{ .Values.upstream.caSecret.key }}
    {{- end }}
  ports:
    - name: a2a
      containerPort: {{ .Values.gateway.port }}
      protocol: TCP
    - name: metrics
      containerPort: {{ .Values.gateway.metricsPort }}
      protocol: TCP
  livenessProbe:
    httpGet:
      path: /healthz
      port: a2a
      scheme: {{ include "q-a2a-gateway.probeScheme" . }}
    periodSeconds: {{ .Values.probes.liveness.periodSeconds }}
    timeoutSeconds: {{ .Values.probes.liveness.timeoutSeconds }}
    failureThreshold: {{ .Values.probes.liveness.failureThreshold }}
  readinessProbe:
    httpGet:
      path: /readyz
      port: a2a
      scheme: {{ include "q-a2a-gateway.probeScheme" . }}
    periodSeconds: {{ .Values.probes.readiness.periodSeconds }}
    timeoutSeconds: {{ .Values.probes.readiness.timeoutSeconds }}
    failureThreshold: {{ .Values.probes.readiness.failureThreshold }}
  resources:
    {{- toYaml .Values.gateway.resources | nindent 4 }}
  securityContext:
    {{- toYaml .Values.containerSecurityContext | nindent 4 }}
  volumeMounts:
    {{- /* The whole ConfigMap as a directory: a subPath mount never sees an update. */}}
    - name: config
      mountPath: /etc/q-a2a-gateway/config
      readOnly: true
    {{- if .Values.gateway.tls.enabled }}
    - name: tls
      mountPath: /etc/q-a2a-gateway/tls
      readOnly: true
    {{- end }}
    {{- if .Values.cardSigning.secretName }}
    - name: card-signing
      mountPath: /etc/q-a2a-gateway/card-signing
      readOnly: true
    {{- end }}
    {{- include "q-a2a-gateway.databaseTlsMount" . | nindent 4 }}
    {{- if .Values.redis.caSecret.name }}
    - name: redis-ca
      mountPath: /etc/q-a2a-gateway/redis-ca
      readOnly: true
    {{- end }}
    {{- if include "q-a2a-gateway.upstreamCa" . }}
    - name: upstream-ca
      mountPath: /etc/q-a2a-gateway/upstream-ca
      readOnly: true
    {{- end }}
{{- end }}
