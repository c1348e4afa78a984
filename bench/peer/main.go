// Command peer is a benchmark peer for gpu-share-webhook: an HTTPS admission webhook in Go,
// standard library only, doing the mutation of policies/default.yaml for pods like the
// benchmark's (bench/core.py, bench/server.py), so that bench/server.py can measure a Go
// webhook doing the same work side by side with ours. Not a product: the policy is data in
// this file, and what the benchmark pods never exercise (a pod's own node affinity, more
// than one shared GPU per container, CUDA_MPS_* values set by the pod) is refused or left
// out rather than modelled. Every request is decoded, decided, patched and encoded afresh.
//
//	peer -addr 127.0.0.1:8443 -cert tls.crt -key tls.key [-gomaxprocs 1]
package main

import (
	"crypto/tls"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"
)

// --------------------------------------------------------------------------- the policy

type nodeClass struct {
	name, product, strategy string
	replicas, memoryMiB     int
}

type profile struct {
	name            string
	threads, memMiB int
}

const (
	policyName   = "default"
	runtimeClass = "nvidia"
	sharedName   = "nvidia.com/gpu.shared"
	labelPrefix  = "nvidia.com/gpu"
	visible      = "NVIDIA_VISIBLE_DEVICES"
	capabilities = "NVIDIA_DRIVER_CAPABILITIES"
	mpsThreads   = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"
	mpsMemory    = "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"
	annPolicy    = "gpu-share.io/policy"
	annProfile   = "gpu-share.io/profile"
	annMutations = "gpu-share.io/mutations"
)

var (
	classes = []nodeClass{
		{"t4-mps", "Tesla-T4", "mps", 4, 15360},
		{"a10g-time-slicing", "NVIDIA-A10G", "time-slicing", 4, 23028},
	}
	profiles       = map[string]profile{"small": {"small", 10, 1536}, "medium": {"medium", 25, 3840}}
	defaultProfile = "medium"
	tolerations    = []toleration{
		{Key: "nvidia.com/gpu", Operator: "Exists", Effect: "NoSchedule"},
		{Key: sharedName, Operator: "Exists", Effect: "NoSchedule"}, // the resource's own taint
	}
	deviceVariables = map[string]bool{visible: true, "NVIDIA_MIG_CONFIG_DEVICES": true,
		"NVIDIA_MIG_MONITOR_DEVICES": true, "NVIDIA_IMEX_CHANNELS": true, "NVIDIA_GDRCOPY": true,
		"NVIDIA_GDS": true, "NVIDIA_MOFED": true, "NVIDIA_NVSWITCH": true}
	hiding = map[string]bool{"void": true, "none": true, "": true}
)

// The labels gpu-feature-discovery puts on a class's nodes, which a nodeSelector is judged by.
func (c nodeClass) labels() map[string]string {
	mps := "false"
	if c.strategy == "mps" {
		mps = "true"
	}
	return map[string]string{labelPrefix + ".sharing-strategy": c.strategy,
		labelPrefix + ".product": c.product, labelPrefix + ".replicas": strconv.Itoa(c.replicas),
		labelPrefix + ".count": "1", labelPrefix + ".memory": strconv.Itoa(c.memoryMiB),
		"nvidia.com/gpu.present": "true", "nvidia.com/mps.capable": mps}
}

// --------------------------------------------------------------------------- what is read

type review struct {
	Request *struct {
		UID  string `json:"uid"`
		Kind struct {
			Group string `json:"group"`
			Kind  string `json:"kind"`
		} `json:"kind"`
		Operation   string `json:"operation"`
		SubResource string `json:"subResource"`
		Object      *pod   `json:"object"`
	} `json:"request"`
}

type pod struct {
	Metadata *struct {
		Annotations map[string]string `json:"annotations"`
	} `json:"metadata"`
	Spec struct {
		RuntimeClassName string            `json:"runtimeClassName"`
		NodeSelector     map[string]string `json:"nodeSelector"`
		Affinity         *struct {
			NodeAffinity *struct {
				Required json.RawMessage `json:"requiredDuringSchedulingIgnoredDuringExecution"`
			} `json:"nodeAffinity"`
		} `json:"affinity"`
		Tolerations    []toleration `json:"tolerations"`
		HostPID        bool         `json:"hostPID"`
		HostIPC        bool         `json:"hostIPC"`
		InitContainers []container  `json:"initContainers"`
		Containers     []container  `json:"containers"`
	} `json:"spec"`
}

type toleration struct {
	Key               string `json:"key,omitempty"`
	Operator          string `json:"operator,omitempty"`
	Value             string `json:"value,omitempty"`
	Effect            string `json:"effect,omitempty"`
	TolerationSeconds *int64 `json:"tolerationSeconds,omitempty"`
}

type container struct {
	Name string `json:"name"`
	Env  []struct {
		Name      string          `json:"name"`
		Value     string          `json:"value"`
		ValueFrom json.RawMessage `json:"valueFrom"`
	} `json:"env"`
	Resources struct {
		Limits   map[string]json.RawMessage `json:"limits"`
		Requests map[string]json.RawMessage `json:"requests"`
	} `json:"resources"`
	SecurityContext *struct {
		Privileged   *bool `json:"privileged"`
		Capabilities *struct {
			Add []string `json:"add"`
		} `json:"capabilities"`
	} `json:"securityContext"`
}

func (c *container) has(name string) bool {
	for _, e := range c.Env {
		if e.Name == name {
			return true
		}
	}
	return false
}

// --------------------------------------------------------------------------- what is written

type op struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value"`
}
type envVar struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}
type expr struct {
	Key      string   `json:"key"`
	Operator string   `json:"operator"`
	Values   []string `json:"values"`
}
type term struct {
	MatchExpressions []expr `json:"matchExpressions"`
}
type affinity struct {
	NodeAffinity struct {
		Required struct {
			Terms []term `json:"nodeSelectorTerms"`
		} `json:"requiredDuringSchedulingIgnoredDuringExecution"`
	} `json:"nodeAffinity"`
}

// ordered is a JSON object of strings that keeps its keys' order (Go maps sort them).
type ordered [][2]string

func (o ordered) MarshalJSON() ([]byte, error) {
	b := []byte{'{'}
	for i, kv := range o {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendQuote(b, kv[0]) // the keys and values here are plain ASCII
		b = append(b, ':')
		b = strconv.AppendQuote(b, kv[1])
	}
	return append(b, '}'), nil
}

type response struct {
	UID       string  `json:"uid"`
	Allowed   bool    `json:"allowed"`
	PatchType string  `json:"patchType,omitempty"`
	Patch     []byte  `json:"patch,omitempty"` // encoding/json writes []byte as base64
	Audit     ordered `json:"auditAnnotations,omitempty"`
	Status    *status `json:"status,omitempty"`
}

type status struct {
	Code    int    `json:"code"`
	Reason  string `json:"reason"`
	Message string `json:"message"`
}

// --------------------------------------------------------------------------- the decision

type decision struct {
	ops    []op
	rules  []string // the rule of each op
	audit  ordered
	denied []string
	lists  map[string]bool // env lists this patch creates
}

func (d *decision) add(rule, path string, value any) {
	d.ops = append(d.ops, op{"add", path, value})
	d.rules = append(d.rules, rule)
}

func (d *decision) deny(format string, args ...any) {
	d.denied = append(d.denied, fmt.Sprintf(format, args...))
}

func (d *decision) addEnv(rule, base string, c *container, vars []envVar) {
	base += "/env"
	if c.Env == nil && !d.lists[base] {
		d.lists[base] = true
		d.add(rule, base, vars)
		return
	}
	for _, v := range vars {
		d.add(rule, base+"/-", v)
	}
}

// One container of the pod (init containers first, as the API server lists them).
type judged struct {
	c         *container
	pointer   string
	gpu       bool
	shared    int // shared GPUs it asks for
	exclusive bool
}

func gpuResource(name string) bool {
	return strings.HasPrefix(name, labelPrefix) || strings.HasPrefix(name, "nvidia.com/mig-")
}

func count(raw json.RawMessage) (int, error) {
	s := string(raw)
	if strings.HasPrefix(s, `"`) {
		if err := json.Unmarshal(raw, &s); err != nil {
			return 0, err
		}
	}
	return strconv.Atoi(s)
}

func classify(d *decision, j *judged) {
	limits, requests := j.c.Resources.Limits, j.c.Resources.Requests
	for name, raw := range limits {
		if gpuResource(name) {
			j.resource(d, name, raw, requests[name])
		}
	}
	for name, raw := range requests {
		if _, in := limits[name]; in || !gpuResource(name) {
			continue
		}
		if name == sharedName {
			d.deny("container %q: requests %s with no limit", j.c.Name, name)
		}
		j.resource(d, name, raw, nil)
	}
}

func (j *judged) resource(d *decision, name string, raw, request json.RawMessage) {
	n, err := count(raw)
	if err != nil || n < 0 {
		d.deny("container %q: invalid quantity %s for %s", j.c.Name, raw, name)
		return
	}
	if request != nil && name == sharedName {
		if m, err := count(request); err != nil || m != n {
			d.deny("container %q: %s requests and limits disagree", j.c.Name, name)
		}
	}
	if n == 0 {
		return
	}
	j.gpu = true
	switch {
	case name == sharedName:
		j.shared = n
	case strings.HasSuffix(name, ".shared"):
		d.deny("container %q: resource not allowed: %s", j.c.Name, name)
	default:
		j.exclusive = true
	}
}

// The refusals the default policy switches on, for what the decoded pod carries.
func check(d *decision, p *pod, all []judged, ann map[string]string, gpu bool) {
	for i := range all {
		j := &all[i]
		for _, e := range j.c.Env {
			if deviceVariables[e.Name] && (e.ValueFrom != nil || !hiding[e.Value]) {
				d.deny("container %q: device variable %s=%q does not only hide GPUs", j.c.Name, e.Name, e.Value)
			}
			if (e.Name == "CUDA_MPS_PIPE_DIRECTORY" || e.Name == "CUDA_MPS_LOG_DIRECTORY") && (j.shared > 0 || !j.exclusive) {
				d.deny("container %q: %s is the device plugin's to set", j.c.Name, e.Name)
			}
		}
		if sc := j.c.SecurityContext; sc != nil {
			if sc.Privileged != nil && *sc.Privileged {
				d.deny("container %q: privileged container", j.c.Name)
			}
			if gpu && sc.Capabilities != nil {
				for _, a := range sc.Capabilities.Add {
					if a = strings.TrimPrefix(strings.ToUpper(strings.TrimSpace(a)), "CAP_"); a == "SYS_ADMIN" || a == "ALL" {
						d.deny("container %q: added capability %s", j.c.Name, a)
					}
				}
			}
		}
	}
	if gpu && (p.Spec.HostPID || p.Spec.HostIPC) {
		d.deny("host namespace in a pod that uses a GPU")
	}
	for k := range ann {
		if strings.HasPrefix(k, "cdi.k8s.io/") || strings.HasPrefix(k, "nvidia.cdi.k8s.io/") {
			d.deny("CDI annotation %s", k)
		}
	}
}

// The classes a shared-GPU pod may use: its nodeSelector's and its profile's MPS ceiling.
func place(d *decision, p *pod, ann map[string]string) ([]nodeClass, profile) {
	if rc := p.Spec.RuntimeClassName; rc != "" && rc != runtimeClass {
		d.deny("runtime class %q is not %q", rc, runtimeClass)
	}
	name, given := ann[annProfile]
	if !given {
		name = defaultProfile
	}
	prof, ok := profiles[name]
	if !ok {
		d.deny("unknown profile %q", name)
		return nil, prof
	}
	if a := p.Spec.Affinity; a != nil && a.NodeAffinity != nil && len(a.NodeAffinity.Required) > 0 && string(a.NodeAffinity.Required) != "null" {
		d.deny("a pod's own required node affinity is not modelled by this benchmark peer")
		return nil, prof
	}
	var left []nodeClass
	for _, c := range classes {
		labels, fits := c.labels(), true
		for k, v := range p.Spec.NodeSelector {
			if known, in := labels[k]; in && known != v {
				fits = false
			}
		}
		if c.strategy == "mps" && (prof.threads > 100/c.replicas || prof.memMiB > c.memoryMiB/c.replicas) {
			fits = false
		}
		if fits {
			left = append(left, c)
		}
	}
	if len(left) == 0 {
		d.deny("no node class of policy %q fits the pod's node selection and profile %q", policyName, name)
	}
	return left, prof
}

var escape = strings.NewReplacer("~", "~0", "/", "~1")

func pin(d *decision, p *pod, left []nodeClass) {
	const strategy, product, replicas = labelPrefix + ".sharing-strategy", labelPrefix + ".product", labelPrefix + ".replicas"
	sel := p.Spec.NodeSelector
	if sel[strategy] != "" && sel[product] != "" && sel[replicas] != "" {
		return // pinned already: the classes left are the ones the selector names
	}
	if len(left) == 1 {
		c := left[0]
		pairs := ordered{{strategy, c.strategy}, {product, c.product}, {replicas, strconv.Itoa(c.replicas)}}
		if sel == nil {
			d.add("node-selection", "/spec/nodeSelector", pairs)
			return
		}
		for _, kv := range pairs {
			if sel[kv[0]] != kv[1] {
				d.add("node-selection", "/spec/nodeSelector/"+escape.Replace(kv[0]), kv[1])
			}
		}
		return
	}
	// One term per (strategy, replicas), its products in one expression.
	var a affinity
	terms, index := []term{}, map[string]int{}
	for _, c := range left {
		key := c.strategy + "/" + strconv.Itoa(c.replicas)
		if i, seen := index[key]; seen {
			e := &terms[i].MatchExpressions[2]
			e.Values = append(e.Values, c.product)
			continue
		}
		index[key] = len(terms)
		terms = append(terms, term{[]expr{{strategy, "In", []string{c.strategy}},
			{replicas, "In", []string{strconv.Itoa(c.replicas)}}, {product, "In", []string{c.product}}}})
	}
	a.NodeAffinity.Required.Terms = terms
	switch {
	case p.Spec.Affinity == nil:
		d.add("node-selection", "/spec/affinity", a)
	case p.Spec.Affinity.NodeAffinity == nil:
		d.add("node-selection", "/spec/affinity/nodeAffinity", a.NodeAffinity)
	default:
		d.add("node-selection", "/spec/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution", a.NodeAffinity.Required)
	}
}

// Whether toleration `have` tolerates every taint `want` does (Kubernetes' matching).
func covers(have, want toleration) bool {
	op := have.Operator
	if op == "" {
		op = "Equal"
	}
	if have.Key != "" && have.Key != want.Key || have.Key == "" && op != "Exists" {
		return false
	}
	if op != "Exists" && (want.Operator != "" && want.Operator != "Equal" || have.Value != want.Value) {
		return false
	}
	if have.Effect != "" && have.Effect != want.Effect {
		return false
	}
	if (want.Effect == "NoExecute" || want.Effect == "") && have.TolerationSeconds != nil {
		return want.TolerationSeconds != nil && *have.TolerationSeconds >= *want.TolerationSeconds
	}
	return true
}

func patch(d *decision, p *pod, all []judged, left []nodeClass, prof profile, shared bool) {
	if shared {
		if p.Spec.RuntimeClassName == "" {
			d.add("runtime-class", "/spec/runtimeClassName", runtimeClass)
		}
		var added []toleration
		for _, want := range tolerations {
			covered := false
			for _, have := range p.Spec.Tolerations {
				covered = covered || covers(have, want)
			}
			if !covered {
				added = append(added, want)
			}
		}
		if p.Spec.Tolerations != nil {
			for _, t := range added {
				d.add("tolerations", "/spec/tolerations/-", t)
			}
		} else if len(added) > 0 {
			d.add("tolerations", "/spec/tolerations", added)
		}
		pin(d, p, left)
		mps := false
		for _, c := range left {
			mps = mps || c.strategy == "mps"
		}
		for i := range all {
			if j := &all[i]; mps && j.shared > 0 {
				var vars []envVar
				if !j.c.has(mpsThreads) {
					vars = append(vars, envVar{mpsThreads, strconv.Itoa(prof.threads)})
				}
				if !j.c.has(mpsMemory) {
					limit := make([]string, j.shared)
					for n := range limit {
						limit[n] = fmt.Sprintf("%d=%dM", n, prof.memMiB)
					}
					vars = append(vars, envVar{mpsMemory, strings.Join(limit, ",")})
				}
				if len(vars) > 0 {
					d.addEnv("mps-limits", all[i].pointer, j.c, vars)
				}
			}
		}
	}
	// The policy's driver capabilities, on each GPU container that sets none.
	for i := range all {
		if j := &all[i]; j.gpu && !j.c.has(capabilities) {
			d.addEnv("driver-capabilities", j.pointer, j.c, []envVar{{capabilities, "compute,utility"}})
		}
	}
	for i := range all {
		if j := &all[i]; !j.gpu && !j.c.has(visible) {
			d.addEnv("visible-devices", j.pointer, j.c, []envVar{{visible, "void"}})
		}
	}
}

// The annotations of a pod the webhook changed, and the review's audit annotations.
func record(d *decision, p *pod, ann map[string]string, left []nodeClass, prof profile, shared bool) {
	if len(d.ops) == 0 && !shared {
		return
	}
	var steps []string
	for _, r := range d.rules {
		if !contains(steps, r) {
			steps = append(steps, r)
		}
	}
	var wanted ordered
	if ann[annPolicy] != policyName {
		wanted = append(wanted, [2]string{annPolicy, policyName})
	}
	if _, has := ann[annProfile]; shared && !has {
		wanted = append(wanted, [2]string{annProfile, prof.name})
	}
	if len(steps) > 0 {
		before := ann[annMutations]
		done := append([]string{}, steps...)
		for _, s := range strings.Split(before, ",") {
			if s != "" && !contains(done, s) {
				done = append(done, s)
			}
		}
		sort.Strings(done)
		if merged := strings.Join(done, ","); merged != before {
			wanted = append(wanted, [2]string{annMutations, merged})
		}
	}
	if shared {
		names := make([]string, len(left))
		for i, c := range left {
			names[i] = c.name
		}
		d.audit = append(d.audit, [2]string{"policy", policyName}, [2]string{"profile", prof.name},
			[2]string{"classes", strings.Join(names, ",")})
	}
	if len(steps) > 0 {
		d.audit = append(d.audit, [2]string{"mutations", strings.Join(steps, ",")})
	}
	switch {
	case len(wanted) == 0:
	case p.Metadata == nil:
		d.add("annotations", "/metadata", map[string]ordered{"annotations": wanted})
	case ann == nil:
		d.add("annotations", "/metadata/annotations", wanted)
	default:
		for _, kv := range wanted {
			d.add("annotations", "/metadata/annotations/"+escape.Replace(kv[0]), kv[1])
		}
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func admit(rv *review) response {
	req := rv.Request
	resp := response{UID: req.UID, Allowed: true}
	p := req.Object
	if p == nil || req.Kind.Group != "" || req.Kind.Kind != "Pod" || req.Operation != "CREATE" || req.SubResource != "" {
		return resp
	}
	d := decision{lists: map[string]bool{}}
	all := make([]judged, 0, len(p.Spec.InitContainers)+len(p.Spec.Containers))
	for i := range p.Spec.InitContainers {
		all = append(all, judged{c: &p.Spec.InitContainers[i], pointer: "/spec/initContainers/" + strconv.Itoa(i)})
	}
	for i := range p.Spec.Containers {
		all = append(all, judged{c: &p.Spec.Containers[i], pointer: "/spec/containers/" + strconv.Itoa(i)})
	}
	gpu, shared, exclusive := false, false, false
	for i := range all {
		classify(&d, &all[i])
		gpu, shared, exclusive = gpu || all[i].gpu, shared || all[i].shared > 0, exclusive || all[i].exclusive
		if all[i].shared > 1 {
			d.deny("more than one shared GPU per container is not modelled by this benchmark peer")
		}
	}
	if shared && exclusive {
		d.deny("exclusive and shared GPUs in one pod")
	}
	var ann map[string]string
	if p.Metadata != nil {
		ann = p.Metadata.Annotations
	}
	check(&d, p, all, ann, gpu)
	var left []nodeClass
	var prof profile
	if shared {
		left, prof = place(&d, p, ann)
	}
	if len(d.denied) == 0 {
		patch(&d, p, all, left, prof, shared)
		record(&d, p, ann, left, prof, shared)
	}
	if len(d.denied) > 0 {
		resp.Allowed = false
		resp.Status = &status{403, "Forbidden", strings.Join(d.denied, "; ")}
		return resp
	}
	resp.Audit = d.audit
	if len(d.ops) > 0 {
		body, err := json.Marshal(d.ops)
		if err != nil {
			panic(err)
		}
		resp.PatchType, resp.Patch = "JSONPatch", body
	}
	return resp
}

// --------------------------------------------------------------------------- the server

func handle(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 3<<20))
	if err != nil {
		http.Error(w, err.Error(), http.StatusRequestEntityTooLarge)
		return
	}
	var rv review
	if err := json.Unmarshal(body, &rv); err != nil || rv.Request == nil || rv.Request.UID == "" {
		http.Error(w, "not an AdmissionReview with a request and its uid", http.StatusBadRequest)
		return
	}
	out, err := json.Marshal(struct {
		APIVersion string   `json:"apiVersion"`
		Kind       string   `json:"kind"`
		Response   response `json:"response"`
	}{"admission.k8s.io/v1", "AdmissionReview", admit(&rv)})
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(out))) // not chunked, as aiohttp answers
	w.Write(out)
}

func main() {
	addr := flag.String("addr", "127.0.0.1:8443", "address to listen on")
	cert := flag.String("cert", "tls.crt", "PEM certificate (chain)")
	key := flag.String("key", "tls.key", "PEM private key")
	procs := flag.Int("gomaxprocs", 1, "GOMAXPROCS: the threads running Go code at once (0: Go's default, all CPUs)")
	flag.Parse()
	if *procs > 0 {
		runtime.GOMAXPROCS(*procs)
	}
	pair, err := tls.LoadX509KeyPair(*cert, *key)
	if err != nil {
		log.Fatal(err)
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /mutate", handle)
	mux.HandleFunc("POST /mutate/default", handle)
	server := &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       90 * time.Second,
		// TLS 1.2 or newer and HTTP/1.1, as our aiohttp server (no HTTP/2).
		TLSConfig:    &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{pair}, NextProtos: []string{"http/1.1"}},
		TLSNextProto: map[string]func(*http.Server, *tls.Conn, http.Handler){},
	}
	fmt.Printf("listening on https://%s (GOMAXPROCS=%d)\n", ln.Addr(), runtime.GOMAXPROCS(0))
	os.Stdout.Sync()
	log.Fatal(server.ServeTLS(ln, "", ""))
}
