// Evaluates an Argo Events trigger parameter's dataTemplate as the Sensor does (argo-events v1.9.6,
// pkg/sensors/triggers/params.go getValueWithTemplate: text/template with sprig v3.3.0 over the event
// data parsed by gjson v1.18.0), so tests/deploy/test_argo_events_example.py can compare its result
// with healer's own. Reads {"template": ..., "data": <event data JSON>} lines on stdin, writes one JSON
// {"value": ...} or {"error": ...} line per input line.
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"text/template"

	"github.com/Masterminds/sprig/v3"
	"github.com/tidwall/gjson"
)

type input struct {
	Template string          `json:"template"`
	Data     json.RawMessage `json:"data"`
}

func evaluate(templString string, value []byte) (string, error) {
	res := gjson.ParseBytes(value)
	tpl, err := template.New("param").Funcs(sprig.FuncMap()).Parse(templString)
	if err != nil {
		return "", err
	}
	var buf bytes.Buffer
	if err := tpl.Execute(&buf, map[string]interface{}{"Input": res.Value()}); err != nil {
		return "", err
	}
	out := buf.String()
	if out == "" || out == "<no value>" {
		return "", fmt.Errorf("template evaluated to empty string or no value: %s", templString)
	}
	return out, nil
}

func main() {
	scanner := bufio.NewScanner(os.Stdin)
	scanner.Buffer(make([]byte, 1<<20), 1<<24)
	encoder := json.NewEncoder(os.Stdout)
	for scanner.Scan() {
		var in input
		if err := json.Unmarshal(scanner.Bytes(), &in); err != nil {
			_ = encoder.Encode(map[string]string{"error": err.Error()})
			continue
		}
		value, err := evaluate(in.Template, in.Data)
		if err != nil {
			_ = encoder.Encode(map[string]string{"error": err.Error()})
			continue
		}
		_ = encoder.Encode(map[string]string{"value": value})
	}
}
