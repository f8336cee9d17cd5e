{{/* Names, labels and the few computed values every template shares. */}}

{{- define "migdra.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "migdra.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "migdra.selectorLabels" -}}
app.kubernetes.io/name: {{ .context.Chart.Name }}
app.kubernetes.io/instance: {{ .context.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "migdra.pluginName" -}}{{ include "migdra.fullname" . }}-kubelet-plugin{{- end -}}
{{- define "migdra.controllerName" -}}{{ include "migdra.fullname" . }}-controller{{- end -}}

{{- define "migdra.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}
{{- end -}}

{{/* The plugin's directory on the host: sockets, checkpoint, locks, device metadata, taints. */}}
{{- define "migdra.pluginDir" -}}{{ .Values.kubeletDir }}/plugins/{{ .Values.driverName }}{{- end -}}

{{/* -v flags of the migdra command group */}}
{{- define "migdra.verbosity" -}}
{{- if ge (int .Values.logVerbosity) 2 }}
- -vv
{{- else if eq (int .Values.logVerbosity) 1 }}
- -v
{{- end }}
{{- end -}}

{{/* The DeviceClasses of deviceclasses/ (single source) with the driver name substituted in the CEL
     selectors only, never in a class's name (the class gpu.migdra.io keeps its name whatever the
     driver is called); the same rule as the local cluster's substitute_driver. */}}
{{- define "migdra.deviceClasses" -}}
{{- $driver := .Values.driverName -}}
{{- $globs := list "deviceclasses/*.yaml" -}}
{{- if .Values.deviceClasses.examples }}{{ $globs = append $globs "deviceclasses/examples/*.yaml" }}{{ end -}}
{{- range $glob := $globs }}
{{- range $path, $_ := $.Files.Glob $glob }}
{{- range $text := regexSplit "(?m)^---\\s*$" ($.Files.Get $path) -1 }}
{{- $doc := fromYaml $text }}
{{- if and $doc (eq (get $doc "kind" | default "") "DeviceClass") }}
{{- range $selector := $doc.spec.selectors }}
{{- if hasKey $selector "cel" }}
{{- $_ := set $selector.cel "expression" (replace "gpu.migdra.io" $driver $selector.cel.expression) }}
{{- end }}
{{- end }}
{{- $labels := merge (dict) ($doc.metadata.labels | default (dict)) (include "migdra.labels" $ | fromYaml) }}
{{- $_ := set $doc.metadata "labels" $labels }}
---
# {{ $path }}
{{ toYaml $doc }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- end -}}
