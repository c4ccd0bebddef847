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

{{/* Credentials come from an existing Secret, never from values or the ConfigMap. */}}
{{- define "q-a2a-gateway.secretEnv" -}}
- name: Q_A2A_DATABASE_URL
  valueFrom:
    secretKeyRef:
      name: {{ .Values.secrets.name }}
      key: {{ .Values.secrets.keys.databaseUrl }}
- name: Q_A2A_REDIS_URL
  valueFrom:
    secretKeyRef:
      name: {{ .Values.secrets.name }}
      key: {{ .Values.secrets.keys.redisUrl }}
- name: Q_A2A_CREDENTIAL_KEYS
  valueFrom:
    secretKeyRef:
      name: {{ .Values.secrets.name }}
      key: {{ .Values.secrets.keys.credentialKeys }}
- name: Q_A2A_CREDENTIAL_ACTIVE_KEY
  valueFrom:
    secretKeyRef:
      name: {{ .Values.secrets.name }}
      key: {{ .Values.secrets.keys.credentialActiveKey }}
      optional: true
- name: Q_A2A_UPSTREAM_SERVICE_TOKEN
  valueFrom:
    secretKeyRef:
      name: {{ .Values.secrets.name }}
      key: {{ .Values.secrets.keys.upstreamServiceToken }}
{{- /* Every replica signs and checks ListTasks page tokens with the same key. */}}
- name: Q_A2A_CURSOR_KEY
  valueFrom:
    secretKeyRef:
      name: {{ .Values.secrets.name }}
      key: {{ .Values.secrets.keys.cursorKey }}
{{- /* Tells the gateway it is one of several: it then refuses to start without that key. */}}
- name: Q_A2A_REPLICAS
  value: {{ .Values.replicaCount | quote }}
{{- end }}

{{- define "q-a2a-gateway.container" -}}
- name: q-a2a-gateway
  image: "{{ .Values.image.repository }}:{{ .Values.image.tag }}"
  imagePullPolicy: {{ .Values.image.pullPolicy }}
  args: ["serve"]
  env:
    - name: Q_A2A_CONFIG
      value: /etc/q-a2a-gateway/gateway.toml
    - name: RUST_LOG
      value: {{ .Values.gateway.logFilter | quote }}
    {{- include "q-a2a-gateway.secretEnv" . | nindent 4 }}
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
    - name: config
      mountPath: /etc/q-a2a-gateway/gateway.toml
      subPath: gateway.toml
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
{{- end }}
