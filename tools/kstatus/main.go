// Command kstatus prints kstatus' verdict for each Kubernetes object of a JSON list read on stdin.
//
// It exists so Stead's e2e tests judge live objects with kstatus' own code (the library Flux uses
// for health), not with a re-implementation: every verdict comes from status.Compute unchanged.
// Input: {"items": [object, ...]}. Output: one JSON list of {"kind", "name", "status", "message"}
// (or "error" when kstatus could not compute a status), in input order.
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
)

type verdict struct {
	Kind    string `json:"kind"`
	Name    string `json:"name"`
	Status  string `json:"status,omitempty"`
	Message string `json:"message,omitempty"`
	Error   string `json:"error,omitempty"`
}

func main() {
	var list struct {
		Items []map[string]interface{} `json:"items"`
	}
	// apimachinery's decoder keeps integers int64 (as the API machinery does); encoding/json's
	// float64 would make kstatus reject metadata.generation.
	data, err := io.ReadAll(os.Stdin)
	if err == nil {
		err = utiljson.Unmarshal(data, &list)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "kstatus: stdin is not a JSON object with an items list: %v\n", err)
		os.Exit(2)
	}
	verdicts := make([]verdict, 0, len(list.Items))
	for _, item := range list.Items {
		object := &unstructured.Unstructured{Object: item}
		v := verdict{Kind: object.GetKind(), Name: object.GetName()}
		result, err := status.Compute(object)
		if err != nil {
			v.Error = err.Error()
		} else {
			v.Status = result.Status.String()
			v.Message = result.Message
		}
		verdicts = append(verdicts, v)
	}
	if err := json.NewEncoder(os.Stdout).Encode(verdicts); err != nil {
		fmt.Fprintf(os.Stderr, "kstatus: %v\n", err)
		os.Exit(1)
	}
}
