// Command podsecurity checks the pods of rendered Kubernetes manifests
// against a Pod Security Standards level with the evaluator the Pod
// Security admission controller itself runs (k8s.io/pod-security-admission),
// so that `make helm-check` knows the chart's pods would be admitted to a
// namespace labelled pod-security.kubernetes.io/enforce=restricted without a
// cluster.
//
// Usage: podsecurity [-level restricted] FILE...
// It prints each workload's verdict and exits 1 if one is not allowed, or
// if the files hold no pod template at all.
//
// It is a module of its own so that the processor's module does not depend
// on the Kubernetes API packages.
package main

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/yaml"
	psapi "k8s.io/pod-security-admission/api"
	"k8s.io/pod-security-admission/policy"
	sigsyaml "sigs.k8s.io/yaml"
)

func main() {
	level := flag.String("level", "restricted", "Pod Security Standards level: baseline or restricted")
	flag.Parse()
	lv, err := psapi.ParseLevel(*level)
	if err != nil || flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: podsecurity [-level baseline|restricted] FILE...")
		os.Exit(2)
	}
	eval, err := policy.NewEvaluator(policy.DefaultChecks(), nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, "podsecurity:", err)
		os.Exit(2)
	}
	failed, pods := false, 0
	for _, name := range flag.Args() {
		n, bad, err := checkFile(eval, psapi.LevelVersion{Level: lv, Version: psapi.LatestVersion()}, name)
		if err != nil {
			fmt.Fprintf(os.Stderr, "podsecurity: %s: %v\n", name, err)
			os.Exit(2)
		}
		pods += n
		failed = failed || bad
	}
	if pods == 0 {
		fmt.Fprintln(os.Stderr, "podsecurity: no pod template found")
		os.Exit(1)
	}
	if failed {
		os.Exit(1)
	}
}

// checkFile evaluates every pod and pod template of a multi-document YAML
// file; it returns how many it found and whether one was refused.
func checkFile(eval policy.Evaluator, lv psapi.LevelVersion, name string) (pods int, failed bool, err error) {
	f, err := os.Open(name)
	if err != nil {
		return 0, false, err
	}
	defer f.Close()
	rd := yaml.NewYAMLReader(bufio.NewReader(f))
	for {
		doc, err := rd.Read()
		if errors.Is(err, io.EOF) {
			return pods, failed, nil
		}
		if err != nil {
			return pods, failed, err
		}
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		var head struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
		}
		if err := sigsyaml.Unmarshal(doc, &head); err != nil {
			return pods, failed, err
		}
		var spec *corev1.PodTemplateSpec
		switch head.Kind {
		case "StatefulSet":
			var o appsv1.StatefulSet
			if err := sigsyaml.UnmarshalStrict(doc, &o); err != nil {
				return pods, failed, fmt.Errorf("%s %s: %w", head.Kind, head.Metadata.Name, err)
			}
			spec = &o.Spec.Template
		case "Deployment":
			var o appsv1.Deployment
			if err := sigsyaml.UnmarshalStrict(doc, &o); err != nil {
				return pods, failed, fmt.Errorf("%s %s: %w", head.Kind, head.Metadata.Name, err)
			}
			spec = &o.Spec.Template
		case "Pod":
			var o corev1.Pod
			if err := sigsyaml.UnmarshalStrict(doc, &o); err != nil {
				return pods, failed, fmt.Errorf("%s %s: %w", head.Kind, head.Metadata.Name, err)
			}
			spec = &corev1.PodTemplateSpec{ObjectMeta: o.ObjectMeta, Spec: o.Spec}
		default:
			continue
		}
		pods++
		var problems []string
		for _, r := range eval.EvaluatePod(lv, &spec.ObjectMeta, &spec.Spec) {
			if !r.Allowed {
				problems = append(problems, r.ForbiddenReason+": "+r.ForbiddenDetail)
			}
		}
		if len(problems) == 0 {
			fmt.Printf("podsecurity: %s %s: allowed at %s\n", head.Kind, head.Metadata.Name, lv)
			continue
		}
		failed = true
		fmt.Printf("podsecurity: %s %s: NOT allowed at %s:\n", head.Kind, head.Metadata.Name, lv)
		for _, p := range problems {
			fmt.Printf("  - %s\n", p)
		}
	}
}
