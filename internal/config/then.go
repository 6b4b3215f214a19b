package config

import (
	"sort"
	"strings"

	"github.com/idem-data/idem/schemas"
)

// validateThen checks one dataset's downstream list: each names another
// declared dataset with the same partition type, once.
func (c *Config) validateThen(v *validator, names []string, name string, d *Dataset) {
	seen := map[string]bool{}
	for _, next := range d.Then {
		switch {
		case seen[next]:
			v.add("then", "%q is listed twice; list each downstream dataset once", next)
			continue
		case next == name:
			v.add("then", "%q names the dataset itself, so each load would trigger itself forever; remove it", next)
		case !hasKey(c.Datasets, next):
			msg := "%q is not a dataset; declare it under datasets: or fix the name"
			if m := closest(next, names); m != "" {
				msg += " (did you mean " + quote(m) + "?)"
			}
			v.add("then", msg, next)
		default:
			down := c.Datasets[next]
			mine, theirs := partitionType(d), partitionType(down)
			if mine != theirs {
				v.add("then", "%q has partition_type %s but %q has %s; a downstream event carries the same partition, so use the same partition_type", next, theirs, name, mine)
			}
		}
		seen[next] = true
	}
}

func hasKey(m map[string]*Dataset, k string) bool {
	_, ok := m[k]
	return ok
}

func quote(s string) string { return `"` + s + `"` }

func partitionType(d *Dataset) schemas.PartitionType {
	if d == nil || d.PartitionType == "" {
		return schemas.PartitionDate
	}
	return d.PartitionType
}

// validateCycles reports every group of datasets whose then: entries trigger
// one another in a loop, once per group, naming one loop through it. Loops of
// a dataset on itself are reported by validateThen.
func (c *Config) validateCycles(v *validator, names []string) {
	edges := make(map[string][]string, len(names))
	for _, name := range names {
		d := c.Datasets[name]
		if d == nil {
			continue
		}
		for _, next := range d.Then {
			if next != name && hasKey(c.Datasets, next) && !contains(edges[name], next) {
				edges[name] = append(edges[name], next)
			}
		}
		sort.Strings(edges[name])
	}
	for _, scc := range stronglyConnected(names, edges) {
		if len(scc) < 2 {
			continue
		}
		cycle := cycleThrough(scc, edges)
		v.problems = append(v.problems, Problem{
			Dataset: cycle[0],
			Field:   "then",
			Message: "cycle " + strings.Join(cycle, " -> ") + ": each load would trigger the next forever; remove one of these then: entries",
		})
	}
}

// stronglyConnected is Tarjan's algorithm; each component comes back sorted,
// and components in order of their smallest name.
func stronglyConnected(names []string, edges map[string][]string) [][]string {
	index := map[string]int{}
	low := map[string]int{}
	onStack := map[string]bool{}
	var stack []string
	var out [][]string
	var visit func(string)
	visit = func(n string) {
		index[n] = len(index)
		low[n] = index[n]
		stack = append(stack, n)
		onStack[n] = true
		for _, m := range edges[n] {
			if _, seen := index[m]; !seen {
				visit(m)
				low[n] = min(low[n], low[m])
			} else if onStack[m] {
				low[n] = min(low[n], index[m])
			}
		}
		if low[n] == index[n] {
			var scc []string
			for {
				top := stack[len(stack)-1]
				stack = stack[:len(stack)-1]
				onStack[top] = false
				scc = append(scc, top)
				if top == n {
					break
				}
			}
			sort.Strings(scc)
			out = append(out, scc)
		}
	}
	for _, n := range names {
		if _, seen := index[n]; !seen {
			visit(n)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i][0] < out[j][0] })
	return out
}

// cycleThrough returns a shortest loop from the component's smallest name back
// to itself, staying inside the component: [a b c a].
func cycleThrough(scc []string, edges map[string][]string) []string {
	in := map[string]bool{}
	for _, n := range scc {
		in[n] = true
	}
	start := scc[0]
	prev := map[string]string{}
	queue := []string{start}
	for len(queue) > 0 {
		n := queue[0]
		queue = queue[1:]
		for _, m := range edges[n] {
			if !in[m] {
				continue
			}
			if m == start {
				path := []string{start}
				for x := n; x != start; x = prev[x] {
					path = append(path, x)
				}
				// path is start, n, ..., reversed after start.
				for i, j := 1, len(path)-1; i < j; i, j = i+1, j-1 {
					path[i], path[j] = path[j], path[i]
				}
				return append(path, start)
			}
			if _, seen := prev[m]; !seen {
				prev[m] = n
				queue = append(queue, m)
			}
		}
	}
	return append(scc, start) // unreachable for a real component
}
