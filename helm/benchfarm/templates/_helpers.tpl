{{- define "benchfarm.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "benchfarm.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "benchfarm.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
app.kubernetes.io/name: {{ include "benchfarm.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "benchfarm.selectorLabels" -}}
app.kubernetes.io/name: {{ include "benchfarm.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* The dashboard's pods: a name of their own, so the operator's selectorLabels never match them */}}
{{- define "benchfarm.webSelectorLabels" -}}
app.kubernetes.io/name: {{ include "benchfarm.name" . }}-web
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: web
{{- end -}}

{{- define "benchfarm.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "benchfarm.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- /* What the operator and its sessions both need: the coordinator, the store, the signing
       key, the internal ranges, device types, the exporters' SSH. */ -}}
{{- define "benchfarm.labEnv" -}}
- {name: LG_COORDINATOR, value: {{ .Values.labgrid.coordinator | quote }}}
{{- if .Values.labgrid.proxy }}
- {name: LG_PROXY, value: {{ .Values.labgrid.proxy | quote }}}
{{- end }}
{{- if .Values.labgrid.tls.existingSecret }}
{{- if not .Values.labgrid.tls.issuerSecret }}
{{- fail "labgrid.tls.issuerSecret is required with labgrid.tls.existingSecret: each board session gets a certificate of its own, issued by the operator" }}
{{- end }}
- {name: BENCHFARM_LABGRID_CA, value: /etc/benchfarm/labgrid/ca.crt}
{{- end }}
- {name: BENCHFARM_S3_ENDPOINT, value: {{ .Values.minio.endpoint | quote }}}
- {name: BENCHFARM_S3_BUCKET, value: {{ .Values.minio.bucket | quote }}}
- {name: BENCHFARM_S3_SECURE, value: {{ .Values.minio.secure | quote }}}
- name: BENCHFARM_S3_ACCESS_KEY
  valueFrom: {secretKeyRef: {name: {{ .Values.minio.existingSecret }}, key: {{ .Values.minio.accessKeyKey }}}}
- name: BENCHFARM_S3_SECRET_KEY
  valueFrom: {secretKeyRef: {name: {{ .Values.minio.existingSecret }}, key: {{ .Values.minio.secretKeyKey }}}}
- name: BENCHFARM_SIGNING_KEY
  valueFrom: {secretKeyRef: {name: {{ .Values.signing.existingSecret | default (printf "%s-signing" (include "benchfarm.fullname" .)) }}, key: {{ .Values.signing.key }}}}
{{- if .Values.ssh.existingSecret }}
- {name: BENCHFARM_SSH_CONFIG, value: /etc/benchfarm/ssh/{{ .Values.ssh.configKey }}}
{{- end }}
- {name: BENCHFARM_INTERNAL_CIDRS, value: {{ .Values.internalCIDRs | quote }}}
- {name: BENCHFARM_DEVICE_TYPES, value: /etc/benchfarm/device-types}
- {name: BENCHFARM_LOG_LEVEL, value: {{ .Values.logLevel | quote }}}
- {name: BENCHFARM_STATE, value: /tmp/benchfarm}   # session logs and the artifact spool
- {name: MPLCONFIGDIR, value: /tmp/matplotlib}
- {name: HOME, value: /tmp}
{{- end -}}

{{- /* The operator's own labgrid client certificate (it may drive every place): the operator's
       pod and the chart's test pods only; a session gets its own (operator/launch/credentials.py). */ -}}
{{- define "benchfarm.labgridClientEnv" -}}
{{- if .Values.labgrid.tls.existingSecret }}
- {name: BENCHFARM_LABGRID_CERT, value: /etc/benchfarm/labgrid/tls.crt}
- {name: BENCHFARM_LABGRID_KEY, value: /etc/benchfarm/labgrid/tls.key}
{{- end }}
{{- end -}}

{{- define "benchfarm.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 10001
runAsGroup: 10001
fsGroup: 10001
seccompProfile: {type: RuntimeDefault}
{{- end -}}

{{- define "benchfarm.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities: {drop: [ALL]}
{{- end -}}

{{- define "benchfarm.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{- /* The exporters' SSH (staging, LG_PROXY): the keys of ssh.existingSecret as files, readable by
       the pod's group (fsGroup 10001) and owned by root, which ssh accepts for a config and a key.
       And labgrid's client certificate (labgrid.tls.existingSecret: ca.crt, tls.crt, tls.key),
       the same way: the operator's; a session's pod gets only ca.crt of it
       (benchfarm.sessionVolume). */ -}}
{{- define "benchfarm.sshMount" -}}
{{- if .Values.ssh.existingSecret }}
- {name: ssh, mountPath: /etc/benchfarm/ssh, readOnly: true}
{{- end }}
{{- if .Values.labgrid.tls.existingSecret }}
- {name: labgrid-tls, mountPath: /etc/benchfarm/labgrid, readOnly: true}
{{- end }}
{{- end -}}

{{- define "benchfarm.sshVolume" -}}
{{- if .Values.ssh.existingSecret }}
- name: ssh
  secret: {secretName: {{ .Values.ssh.existingSecret | quote }}, defaultMode: 0440}
{{- end }}
{{- if .Values.labgrid.tls.existingSecret }}
- name: labgrid-tls
  secret: {secretName: {{ .Values.labgrid.tls.existingSecret | quote }}, defaultMode: 0440}
{{- end }}
{{- end -}}

{{- /* A session pod's: the exporters' SSH, and of labgrid's Secret only the CA that vouches for the
       coordinator; its own certificate comes sealed in its environment (operator/launch/credentials.py). */ -}}
{{- define "benchfarm.sessionVolume" -}}
{{- if .Values.ssh.existingSecret }}
- name: ssh
  secret: {secretName: {{ .Values.ssh.existingSecret | quote }}, defaultMode: 0440}
{{- end }}
{{- if .Values.labgrid.tls.existingSecret }}
- name: labgrid-tls
  secret: {secretName: {{ .Values.labgrid.tls.existingSecret | quote }}, defaultMode: 0440,
           items: [{key: ca.crt, path: ca.crt}]}
{{- end }}
{{- end -}}

{{- /* The results database (benchfarm.history): the operator indexes finished runs there. An
       existing PostgreSQL, its URL in a Secret; none named = no index (runs are unaffected). */ -}}
{{- /* The operator's notifications: SMTP (STARTTLS), the retries. */ -}}
{{- define "benchfarm.notificationsEnv" -}}
{{- with .Values.notifications }}
{{- if .smtp.host }}
- {name: BENCHFARM_SMTP_HOST, value: {{ .smtp.host | quote }}}
- {name: BENCHFARM_SMTP_PORT, value: {{ .smtp.port | quote }}}
- {name: BENCHFARM_SMTP_FROM, value: {{ .smtp.from | quote }}}
{{- if .smtp.existingSecret }}
- name: BENCHFARM_SMTP_USERNAME
  valueFrom: {secretKeyRef: {name: {{ .smtp.existingSecret }}, key: {{ .smtp.usernameKey }}}}
- name: BENCHFARM_SMTP_PASSWORD
  valueFrom: {secretKeyRef: {name: {{ .smtp.existingSecret }}, key: {{ .smtp.passwordKey }}}}
{{- end }}
{{- if .smtp.caConfigMap }}
- {name: BENCHFARM_SMTP_CA_FILE, value: /etc/benchfarm/smtp-ca/ca.crt}
{{- end }}
{{- end }}
- {name: BENCHFARM_NOTIFY_BACKOFF_SECONDS, value: {{ .backoffSeconds | quote }}}
- {name: BENCHFARM_NOTIFY_BACKOFF_MAX_SECONDS, value: {{ .backoffMaxSeconds | quote }}}
- {name: BENCHFARM_NOTIFY_GIVE_UP_SECONDS, value: {{ .giveUpSeconds | quote }}}
- {name: BENCHFARM_NOTIFY_DEADLINE_SECONDS, value: {{ .deadlineSeconds | quote }}}
{{- end }}
{{- end -}}

{{- define "benchfarm.databaseEnv" -}}
{{- if .Values.database.existingSecret }}
- name: BENCHFARM_DATABASE_URL
  valueFrom: {secretKeyRef: {name: {{ .Values.database.existingSecret }}, key: {{ .Values.database.urlKey }}}}
{{- end }}
{{- end -}}
