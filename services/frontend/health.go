package frontend

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"

	"github.com/cairn-kv/cairn/internal/obs"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// healthKey is the key the health checks read (nothing needs to exist there).
var healthKey = []byte("health")

// adminMux serves etcd's HTTP admin endpoints: /health (etcd's JSON), /readyz and /livez (etcd's named
// checks, ?verbose and ?exclude=), /metrics and /version.
func (f *Frontend) adminMux() *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(f.metrics.registry, promhttp.HandlerOpts{Registry: f.metrics.registry}))
	mux.HandleFunc("/health", f.serveHealth)
	mux.HandleFunc("/version", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		body, _ := json.Marshal(struct {
			Server  string `json:"etcdserver"`
			Cluster string `json:"etcdcluster"`
		}{ServerVersion, ClusterVersion + ".0"})
		_, _ = w.Write(body)
	})
	f.installChecks(mux, "/readyz", []namedCheck{
		{"data_corruption", f.alarmCheck(pb.AlarmType_CORRUPT)},
		{"serializable_read", f.readCheck(true)},
		{"linearizable_read", f.readCheck(false)},
		{"non_learner", f.learnerCheck},
	})
	f.installChecks(mux, "/livez", []namedCheck{{"serializable_read", f.readCheck(true)}})
	if f.cfg.EnablePprof {
		obs.HandlePprof(mux)
	}
	return mux
}

// serveHealth is etcd's /health: unhealthy on an active alarm (unless ?exclude=NAME), without a leader, or
// when a read fails (linearizable unless ?serializable=true).
func (f *Frontend) serveHealth(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		w.Header().Set("Allow", http.MethodGet)
		http.Error(w, "Method Not Allowed", http.StatusMethodNotAllowed)
		return
	}
	serializable := r.URL.Query().Get("serializable") == "true"
	reason := f.healthReason(r.Context(), r.URL.Query()["exclude"], serializable)
	body, _ := json.Marshal(map[string]string{"health": fmt.Sprint(reason == ""), "reason": reason})
	if reason != "" {
		http.Error(w, string(body), http.StatusServiceUnavailable)
		return
	}
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(body)
}

func (f *Frontend) healthReason(ctx context.Context, excluded []string, serializable bool) string {
	v := f.pool.view()
	if v.home != nil {
		if st := v.home.status.Load(); st != nil {
			for _, a := range st.Alarms {
				if slices.Contains(excluded, a.Alarm.String()) {
					continue
				}
				switch a.Alarm {
				case pb.AlarmType_NOSPACE, pb.AlarmType_CORRUPT:
					return "ALARM " + a.Alarm.String()
				default:
					return "ALARM UNKNOWN"
				}
			}
		}
	}
	if !serializable && v.leader == 0 {
		return "RAFT NO LEADER"
	}
	if err := f.readCheck(serializable)(ctx); err != nil {
		return "RANGE ERROR:" + err.Error()
	}
	return ""
}

// namedCheck is one of etcd's /readyz or /livez checks.
type namedCheck struct {
	name  string
	check func(context.Context) error
}

// readCheck reads through the frontend's normal routing, as a client would.
func (f *Frontend) readCheck(serializable bool) func(context.Context) error {
	return func(ctx context.Context) error {
		_, err := (&kvServer{f: f}).Range(ctx, &pb.RangeRequest{Key: healthKey, KeysOnly: true, Limit: 1,
			Serializable: serializable})
		return err
	}
}

func (f *Frontend) alarmCheck(alarm pb.AlarmType) func(context.Context) error {
	return func(context.Context) error {
		v := f.pool.view()
		if v.home == nil {
			return nil
		}
		if st := v.home.status.Load(); st != nil {
			for _, a := range st.Alarms {
				if a.Alarm == alarm {
					return fmt.Errorf("alarm activated: %s", a.Alarm)
				}
			}
		}
		return nil
	}
}

func (f *Frontend) learnerCheck(context.Context) error {
	v := f.pool.view()
	if v.home == nil {
		return nil
	}
	if m, ok := v.memberOf(v.home.memberID.Load()); ok && m.IsLearner {
		return fmt.Errorf("member %x is a learner", m.ID)
	}
	return nil
}

// installChecks serves root (every check but the ?exclude=d ones) and root/NAME (one check) as etcd does:
// 200 "ok" (with each check's line when ?verbose), or 503 with every check's line.
func (f *Frontend) installChecks(mux *http.ServeMux, root string, checks []namedCheck) {
	run := func(w http.ResponseWriter, r *http.Request, selected []namedCheck) {
		if r.Method != http.MethodGet {
			w.Header().Set("Allow", http.MethodGet)
			http.Error(w, "Method Not Allowed", http.StatusMethodNotAllowed)
			return
		}
		var out bytes.Buffer
		failed := false
		for _, c := range selected {
			if err := c.check(r.Context()); err != nil {
				failed = true
				fmt.Fprintf(&out, "[-]%s failed: %v\n", c.name, err)
			} else {
				fmt.Fprintf(&out, "[+]%s ok\n", c.name)
			}
		}
		if failed {
			http.Error(w, out.String(), http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		if _, verbose := r.URL.Query()["verbose"]; verbose {
			_, _ = w.Write(out.Bytes())
		}
		_, _ = fmt.Fprint(w, "ok\n")
	}
	mux.HandleFunc(root, func(w http.ResponseWriter, r *http.Request) {
		excluded := r.URL.Query()["exclude"]
		var selected []namedCheck
		for _, c := range checks {
			if !slices.Contains(excluded, c.name) {
				selected = append(selected, c)
			}
		}
		run(w, r, selected)
	})
	for _, c := range checks {
		mux.HandleFunc(root+"/"+c.name, func(w http.ResponseWriter, r *http.Request) { run(w, r, []namedCheck{c}) })
	}
}

// viewPublished is told of every new view of the pool.
func (f *Frontend) viewPublished(v *view) {
	f.publishHealth(v)
	f.auth.observe(v)
}

// publishHealth sets grpc.health.v1's status (of the server, service "") from a new view: SERVING while
// the frontend knows the raft leader, as etcd serves only while it has one.
func (f *Frontend) publishHealth(v *view) {
	status := healthpb.HealthCheckResponse_NOT_SERVING
	if v.leader != 0 {
		status = healthpb.HealthCheckResponse_SERVING
	}
	f.health.SetServingStatus("", status)
}
