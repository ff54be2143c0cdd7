package obs

import (
	"net/http"
	"net/http/httptest"
	"runtime"
	"testing"
)

// TestHandlePprofTurnsOnTheMutexProfile: like etcd's --enable-pprof, serving pprof turns the mutex profile on
// (one event in 5) unless a rate was set, and serves it.
func TestHandlePprofTurnsOnTheMutexProfile(t *testing.T) {
	tests := []struct {
		name      string
		set, want int
	}{
		{"off before", 0, 5},
		{"set before", 50, 50},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := runtime.SetMutexProfileFraction(tt.set)
			t.Cleanup(func() { runtime.SetMutexProfileFraction(before) })
			mux := http.NewServeMux()
			HandlePprof(mux)
			if got := runtime.SetMutexProfileFraction(-1); got != tt.want {
				t.Fatalf("mutex profile fraction %d, want %d", got, tt.want)
			}
			rec := httptest.NewRecorder()
			mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/debug/pprof/mutex?debug=1", nil))
			if rec.Code != http.StatusOK || rec.Body.Len() == 0 {
				t.Fatalf("/debug/pprof/mutex: %d, %d bytes", rec.Code, rec.Body.Len())
			}
		})
	}
}
