{{/* Chart name. */}}
{{- define "gomsg.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Fully qualified app name; components append "-<component>". */}}
{{- define "gomsg.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 50 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 50 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 50 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "gomsg.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels of every object; call with (dict "root" $ "component" "boat"). */}}
{{- define "gomsg.labels" -}}
helm.sh/chart: {{ include "gomsg.chart" .root }}
{{ include "gomsg.selectorLabels" . }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
app.kubernetes.io/part-of: gomsg
{{- end }}

{{- define "gomsg.selectorLabels" -}}
app.kubernetes.io/name: {{ include "gomsg.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
{{- if .component }}
app.kubernetes.io/component: {{ .component }}
{{- end }}
{{- end }}

{{- define "gomsg.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{- define "gomsg.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "gomsg.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "gomsg.jwtSecretName" -}}
{{- default (printf "%s-jwt" (include "gomsg.fullname" .)) .Values.auth.existingSecret }}
{{- end }}

{{- define "gomsg.apiKeysSecretName" -}}
{{- default (printf "%s-api-keys" (include "gomsg.fullname" .)) .Values.auth.apiKeysExistingSecret }}
{{- end }}

{{- /* GOMSG_INTERNAL_TOKEN of boat, station and carrier (the internal APIs' shared token). */}}
{{- define "gomsg.internalTokenEnv" -}}
- name: GOMSG_INTERNAL_TOKEN
  valueFrom:
    secretKeyRef:
      name: {{ default (printf "%s-internal" (include "gomsg.fullname" .)) .Values.auth.internalTokenExistingSecret }}
      key: internal-token
{{- end }}

{{- define "gomsg.apnsSecretName" -}}
{{- default (printf "%s-apns" (include "gomsg.fullname" .)) .Values.horn.apns.existingSecret }}
{{- end }}

{{- define "gomsg.fcmSecretName" -}}
{{- default (printf "%s-fcm" (include "gomsg.fullname" .)) .Values.horn.fcm.existingSecret }}
{{- end }}

{{/*
Probes of a gomsg container; call with (dict "root" $ "cfg" .Values.boat "grpcPort" "client").
startup and liveness: GET /healthz on the ops port (the process runs; the ops
port opens once the backends are dialed, hence the startup probe's budget).
Liveness does not follow dependencies or draining, so a Redis outage or a
drain never restarts pods. readiness: "grpc" means ready while serving and
not draining, whatever the backends do: grpc.health.v1 on grpcPort
(NOT_SERVING before serving and while draining) or, with TLS on, where the
kubelet's gRPC probe cannot go, the same answer from /readyz with every
backend excluded. "http" GETs /readyz (503 while draining or while a backend
the service uses is unreachable).
*/}}
{{- define "gomsg.probes" -}}
startupProbe:
  httpGet:
    path: /healthz
    port: ops
  periodSeconds: 2
  failureThreshold: 60
livenessProbe:
  httpGet:
    path: /healthz
    port: ops
  periodSeconds: 10
  timeoutSeconds: 3
  failureThreshold: 3
readinessProbe:
{{- if and (eq .cfg.probe "grpc") (not .root.Values.tls.secretName) }}
  grpc:
    port: {{ .grpcPort }}
{{- else if eq .cfg.probe "grpc" }}
  httpGet:
    path: /readyz?exclude=redis&exclude=kafka&exclude=nats&exclude=etcd
    port: ops
{{- else }}
  httpGet:
    path: /readyz
    port: ops
{{- end }}
  periodSeconds: 5
  timeoutSeconds: 3
  failureThreshold: 2
{{- end }}

{{/* Pod-level settings every component shares; call with (dict "root" $ "cfg" .Values.boat). */}}
{{- define "gomsg.podCommon" -}}
serviceAccountName: {{ include "gomsg.serviceAccountName" .root }}
{{- with .root.Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
securityContext:
  {{- toYaml .root.Values.podSecurityContext | nindent 2 }}
{{- with .cfg.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .cfg.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .cfg.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .cfg.topologySpreadConstraints }}
topologySpreadConstraints:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/* Container settings every component shares. */}}
{{- define "gomsg.containerCommon" -}}
image: {{ include "gomsg.image" .root }}
imagePullPolicy: {{ .root.Values.image.pullPolicy }}
securityContext:
  {{- toYaml .root.Values.securityContext | nindent 2 }}
resources:
  {{- toYaml .cfg.resources | nindent 2 }}
{{- end }}

{{/* Pod annotations: roll pods when their configuration changes. */}}
{{- define "gomsg.podAnnotations" -}}
checksum/config: {{ include (print .root.Template.BasePath "/configmap.yaml") .root | sha256sum }}
{{- with .cfg.podAnnotations }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/*
GOMSG_REDIS_ADDRS: backends.redisAddrs, comma-separated. The deprecated
backends.redisAddr, from values written before redisAddrs, stands in for them
as long as nothing says otherwise: a redisAddrs other than the chart's default
(here and in values.yaml), or redisCluster, means the user set the new form
too, and rendering one of the two would silently drop the other. Several
addresses without redisCluster are refused here, not by gomsg at start.
*/}}
{{- define "gomsg.redisAddrs" -}}
{{- $b := .Values.backends }}
{{- $addrs := $b.redisAddrs }}
{{- with $b.redisAddr }}
{{- if $b.redisCluster }}
{{- fail (printf "backends.redisAddr %s is the deprecated one-server setting: with backends.redisCluster name the cluster's nodes in backends.redisAddrs and unset backends.redisAddr (--set backends.redisAddr=null)" .) }}
{{- end }}
{{- $default := list "gomsg-redis-master:6379" }}
{{- if not (has (toJson $addrs) (list (toJson $default) (toJson (list .)))) }}
{{- fail (printf "backends.redisAddr %s and backends.redisAddrs %s are both set: keep backends.redisAddrs and unset backends.redisAddr (--set backends.redisAddr=null), its deprecated one-server form" . (join "," $addrs)) }}
{{- end }}
{{- $addrs = list . }}
{{- end }}
{{- if and (gt (len $addrs) 1) (not $b.redisCluster) }}
{{- fail (printf "backends.redisAddrs has %d addresses (%s) without backends.redisCluster: name one Redis server, or set backends.redisCluster=true for a Redis Cluster" (len $addrs) (join "," $addrs)) }}
{{- end }}
{{- join "," $addrs }}
{{- end }}

{{/* GOMSG_* settings of TLS and backend credentials (common ConfigMap). */}}
{{- define "gomsg.securityEnv" -}}
{{- $t := .Values.tls }}
{{- if $t.secretName }}
GOMSG_TLS_CERT_FILE: /etc/gomsg/tls/tls.crt
GOMSG_TLS_KEY_FILE: /etc/gomsg/tls/tls.key
GOMSG_TLS_CA_FILE: /etc/gomsg/tls/ca.crt
{{- if $t.internalMTLS }}
GOMSG_INTERNAL_CA_FILE: /etc/gomsg/tls/ca.crt
{{- end }}
{{- with $t.serverName }}
GOMSG_TLS_SERVER_NAME: {{ . | quote }}
{{- end }}
{{- end }}
{{- range $name, $b := .Values.backendCredentials }}
{{- $env := upper $name }}
{{- if eq $name "nats" }}
{{- include "gomsg.natsCredentialsEnv" (dict "b" $b "tls" $t) }}
{{- else }}
{{- with $b.username }}
GOMSG_{{ $env }}_USERNAME: {{ . | quote }}
{{- end }}
{{- if $b.existingSecret }}
GOMSG_{{ $env }}_PASSWORD_FILE: /etc/gomsg/{{ $name }}/password
{{- end }}
{{- if $b.tls }}
GOMSG_{{ $env }}_TLS: "true"
{{- if $t.secretName }}
GOMSG_{{ $env }}_CA_FILE: /etc/gomsg/tls/ca.crt
{{- end }}
{{- end }}
{{- if and (eq $name "kafka") $b.saslMechanism }}
GOMSG_KAFKA_SASL_MECHANISM: {{ $b.saslMechanism | quote }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}

{{/*
NATS's credentials: one of a password (with a user), a token, an NKey seed or
a .creds file, from the Secret backendCredentials.nats.existingSecret under
the key its credential names; the flags that read each are files, so no
credential is in the environment or on a command line.
*/}}
{{- define "gomsg.natsCredentialsEnv" -}}
{{- $b := .b }}
{{- $files := dict "password" "GOMSG_NATS_PASSWORD_FILE" "token" "GOMSG_NATS_TOKEN_FILE" "nkey" "GOMSG_NATS_NKEY_SEED_FILE" "creds" "GOMSG_NATS_CREDS_FILE" }}
{{- $cred := $b.credential | default "password" }}
{{- if not (hasKey $files $cred) }}
{{- fail (printf "backendCredentials.nats.credential %q: want password, token, nkey or creds" $cred) }}
{{- end }}
{{- if and $b.user (ne $cred "password") }}
{{- fail (printf "backendCredentials.nats.user %q is set with credential %s: a user goes with a password only" $b.user $cred) }}
{{- end }}
{{- if and $b.existingSecret (eq $cred "password") (not $b.user) }}
{{- fail "backendCredentials.nats.existingSecret holds a password: set backendCredentials.nats.user too" }}
{{- end }}
{{- with $b.user }}
GOMSG_NATS_USER: {{ . | quote }}
{{- end }}
{{- if $b.existingSecret }}
{{ get $files $cred }}: /etc/gomsg/nats/{{ $cred }}
{{- end }}
{{- if $b.tls }}
GOMSG_NATS_TLS: "true"
{{- if .tls.secretName }}
GOMSG_NATS_CA_FILE: /etc/gomsg/tls/ca.crt
{{- end }}
{{- end }}
{{- end }}

{{/* Secret volumes of TLS and backend passwords, and their mounts. */}}
{{- define "gomsg.securityVolumes" -}}
{{- if .Values.tls.secretName }}
- name: tls
  secret:
    secretName: {{ .Values.tls.secretName }}
{{- end }}
{{- range $name, $b := .Values.backendCredentials }}
{{- if $b.existingSecret }}
{{- $key := "password" }}
{{- if eq $name "nats" }}
{{- $key = $b.credential | default "password" }}
{{- end }}
- name: {{ $name }}-password
  secret:
    secretName: {{ $b.existingSecret }}
    items:
      - key: {{ $key }}
        path: {{ $key }}
{{- end }}
{{- end }}
{{- end }}

{{- define "gomsg.securityMounts" -}}
{{- if .Values.tls.secretName }}
- name: tls
  mountPath: /etc/gomsg/tls
  readOnly: true
{{- end }}
{{- range $name, $b := .Values.backendCredentials }}
{{- if $b.existingSecret }}
- name: {{ $name }}-password
  mountPath: /etc/gomsg/{{ $name }}
  readOnly: true
{{- end }}
{{- end }}
{{- end }}

{{/* station's volumes: the security ones and the Push API's client CA. */}}
{{- define "gomsg.stationVolumes" -}}
{{ include "gomsg.securityVolumes" . }}
{{- with .Values.auth.pushClientCASecret }}
- name: push-client-ca
  secret:
    secretName: {{ . }}
    items:
      - key: ca.crt
        path: ca.crt
{{- end }}
{{- end }}

{{- define "gomsg.stationMounts" -}}
{{ include "gomsg.securityMounts" . }}
{{- if .Values.auth.pushClientCASecret }}
- name: push-client-ca
  mountPath: /etc/gomsg/push-client-ca
  readOnly: true
{{- end }}
{{- end }}

{{/*
A Service reachable from outside the cluster (NodePort, LoadBalancer) without
TLS would carry credentials in plaintext over networks nobody here controls:
refuse it unless the values say something in front terminates TLS.
Call with (dict "root" $ "cfg" .Values.boat "component" "boat" "carries" "…").
*/}}
{{- define "gomsg.requireTLSOutside" -}}
{{- $svc := .cfg.service }}
{{- if and (ne $svc.type "ClusterIP") (not .root.Values.tls.secretName) (not $svc.allowPlaintext) }}
{{- fail (printf "%s.service.type %s exposes %s outside the cluster in plaintext: set tls.secretName, or %s.service.allowPlaintext=true if what is in front terminates TLS for it" .component $svc.type .carries .component) }}
{{- end }}
{{- end }}
