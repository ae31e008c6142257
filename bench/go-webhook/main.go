// A Go net/http admission webhook doing the same work as hyperslice's /mutate-pods for a
// StatefulSet pod (decode the AdmissionReview, find the owner in an in-memory lister as an
// informer would serve it, compute TPU_WORKER_ID/TPU_WORKER_HOSTNAMES and the slice's topology
// variables, build the JSONPatch, base64 it, encode the response). Standard library only; used by
// bench/webhook_bench.cc as the comparison point, under the same load generator.
package main

import (
	"encoding/base64"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
)

type ownerRef struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Name       string `json:"name"`
	UID        string `json:"uid"`
	Controller *bool  `json:"controller,omitempty"`
}

type envVar struct {
	Name      string          `json:"name"`
	Value     string          `json:"value,omitempty"`
	ValueFrom json.RawMessage `json:"valueFrom,omitempty"`
}

type container struct {
	Name      string    `json:"name"`
	Env       *[]envVar `json:"env,omitempty"`
	Resources struct {
		Limits   map[string]json.RawMessage `json:"limits,omitempty"`
		Requests map[string]json.RawMessage `json:"requests,omitempty"`
	} `json:"resources"`
}

type pod struct {
	Metadata struct {
		Name            string            `json:"name"`
		Namespace       string            `json:"namespace"`
		Labels          map[string]string `json:"labels"`
		Annotations     map[string]string `json:"annotations"`
		OwnerReferences []ownerRef        `json:"ownerReferences"`
	} `json:"metadata"`
	Spec struct {
		NodeSelector map[string]string `json:"nodeSelector"`
		Containers   []container       `json:"containers"`
	} `json:"spec"`
}

type admissionReview struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Request    *struct {
		UID       string `json:"uid"`
		Namespace string `json:"namespace"`
		Operation string `json:"operation"`
		Object    pod    `json:"object"`
	} `json:"request,omitempty"`
}

type statefulSet struct {
	UID      string
	Replicas int
	Service  string
}

type nodeGroup struct {
	Topology, Accelerator, ChipsPerHost, HostBounds string
}

// What an informer would hold; filled at start like a synced cache.
var (
	statefulSets = map[string]statefulSet{"ns1/tpu-worker-v7x": {UID: "sts-uid", Replicas: 2, Service: "tpu-svc-v7x"}}
	nodeGroups   = map[string]nodeGroup{"ns1/my-group": {"2x2x2", "tpu7x-16", "2,2,1", "1,1,2"}}
)

type patchOp struct {
	Op    string      `json:"op"`
	Path  string      `json:"path"`
	Value interface{} `json:"value"`
}

func mutate(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		http.Error(w, "POST only", http.StatusMethodNotAllowed)
		return
	}
	if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(strings.ToLower(ct), "application/json") {
		http.Error(w, "unsupported Content-Type", http.StatusUnsupportedMediaType)
		return
	}
	var review admissionReview
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 3<<20)).Decode(&review); err != nil || review.Request == nil {
		http.Error(w, "malformed AdmissionReview", http.StatusBadRequest)
		return
	}
	req := review.Request
	p := &req.Object
	var vars []envVar
	for _, o := range p.Metadata.OwnerReferences {
		if o.Controller == nil || !*o.Controller || o.Kind != "StatefulSet" {
			continue
		}
		ordinal, err := strconv.Atoi(p.Metadata.Labels["apps.kubernetes.io/pod-index"])
		sts, ok := statefulSets[req.Namespace+"/"+o.Name]
		if err != nil || !ok || sts.UID != o.UID || ordinal >= sts.Replicas {
			continue
		}
		hosts := make([]string, 0, sts.Replicas)
		for i := 0; i < sts.Replicas; i++ {
			hosts = append(hosts, fmt.Sprintf("%s-%d.%s", o.Name, i, sts.Service))
		}
		vars = append(vars, envVar{Name: "TPU_WORKER_ID", Value: strconv.Itoa(ordinal)},
			envVar{Name: "TPU_WORKER_HOSTNAMES", Value: strings.Join(hosts, ",")})
	}
	if sel := p.Spec.NodeSelector["cloud.google.com/tpu-node-group"]; sel != "" {
		if g, ok := nodeGroups[req.Namespace+"/"+strings.TrimPrefix(sel, req.Namespace+"-")]; ok {
			vars = append(vars, envVar{Name: "TPU_TOPOLOGY", Value: g.Topology},
				envVar{Name: "TPU_ACCELERATOR_TYPE", Value: g.Accelerator},
				envVar{Name: "TPU_CHIPS_PER_HOST_BOUNDS", Value: g.ChipsPerHost},
				envVar{Name: "TPU_HOST_BOUNDS", Value: g.HostBounds})
		}
	}
	var ops []patchOp
	for i, c := range p.Spec.Containers {
		if _, ok := c.Resources.Limits["google.com/tpu"]; !ok {
			continue
		}
		present := map[string]bool{}
		if c.Env != nil {
			for _, e := range *c.Env {
				present[e.Name] = true
			}
		}
		var add []envVar
		for _, v := range vars {
			if !present[v.Name] {
				add = append(add, v)
			}
		}
		if len(add) == 0 {
			continue
		}
		base := fmt.Sprintf("/spec/containers/%d/env", i)
		if c.Env == nil {
			ops = append(ops, patchOp{"add", base, add})
		} else {
			for _, v := range add {
				ops = append(ops, patchOp{"add", base + "/-", v})
			}
		}
	}
	resp := map[string]interface{}{"uid": req.UID, "allowed": true}
	if len(ops) > 0 {
		patch, _ := json.Marshal(ops)
		resp["patchType"] = "JSONPatch"
		resp["patch"] = base64.StdEncoding.EncodeToString(patch)
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]interface{}{
		"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": resp})
}

func main() {
	cert := flag.String("tls-cert-file", "", "")
	key := flag.String("tls-key-file", "", "")
	addr := flag.String("listen", "127.0.0.1:0", "")
	flag.Parse()
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatal(err)
	}
	// The bench reads the chosen port from stdout.
	fmt.Fprintf(os.Stdout, "port %d\n", ln.Addr().(*net.TCPAddr).Port)
	mux := http.NewServeMux()
	mux.HandleFunc("/mutate-pods", mutate)
	log.Fatal(http.ServeTLS(ln, mux, *cert, *key))
}
