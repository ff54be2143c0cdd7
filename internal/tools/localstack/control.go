package localstack

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"sync"
)

// controlSocket is the unix socket, in DataDir, on which a running stack takes membership changes from
// `cairn up member add/remove` (another process: the running `cairn up` owns the layout and the children).
const controlSocket = "control.sock"

// MemberChange is the control socket's answer to a membership change.
type MemberChange struct {
	Name string `json:"name"`
	// ID is the member's ID in hex, as etcdctl prints it.
	ID    string `json:"id,omitempty"`
	Error string `json:"error,omitempty"`
}

// control serves the control socket while the stack runs.
type control struct {
	server *http.Server
	done   sync.WaitGroup
}

// startControl listens on DataDir/control.sock (replacing a stale one: DataDir is locked by this stack).
func (s *Stack) startControl() (*control, error) {
	path := filepath.Join(s.cfg.DataDir, controlSocket)
	_ = os.Remove(path)
	lis, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("localstack: control socket: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /members", func(w http.ResponseWriter, r *http.Request) {
		learner, _ := strconv.ParseBool(r.URL.Query().Get("learner"))
		name, id, err := s.AddMember(r.Context(), r.URL.Query().Get("name"), learner)
		writeChange(w, name, id, err)
	})
	mux.HandleFunc("DELETE /members/{name}", func(w http.ResponseWriter, r *http.Request) {
		id, err := s.RemoveMember(r.Context(), r.PathValue("name"))
		writeChange(w, r.PathValue("name"), id, err)
	})
	c := &control{server: &http.Server{Handler: mux}}
	c.done.Go(func() { _ = c.server.Serve(lis) })
	return c, nil
}

func writeChange(w http.ResponseWriter, name string, id uint64, err error) {
	change := MemberChange{Name: name}
	if id != 0 {
		change.ID = fmt.Sprintf("%x", id)
	}
	w.Header().Set("Content-Type", "application/json")
	if err != nil {
		change.Error = err.Error()
		w.WriteHeader(http.StatusConflict)
	}
	_ = json.NewEncoder(w).Encode(change)
}

// stop closes the socket and waits for the server; a change in progress is cut short.
func (c *control) stop() {
	if c == nil {
		return
	}
	_ = c.server.Close()
	c.done.Wait()
}

// RequestMemberAdd asks the stack running in dataDir to add a member (name "": the next number) and waits
// until its processes are ready.
func RequestMemberAdd(ctx context.Context, dataDir, name string, learner bool) (MemberChange, error) {
	query := url.Values{"name": {name}, "learner": {strconv.FormatBool(learner)}}
	return requestChange(ctx, dataDir, http.MethodPost, "/members?"+query.Encode())
}

// RequestMemberRemove asks the stack running in dataDir to remove the named member and stop its processes.
func RequestMemberRemove(ctx context.Context, dataDir, name string) (MemberChange, error) {
	return requestChange(ctx, dataDir, http.MethodDelete, "/members/"+url.PathEscape(name))
}

func requestChange(ctx context.Context, dataDir, method, path string) (MemberChange, error) {
	socket := filepath.Join(dataDir, controlSocket)
	client := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", socket)
		},
	}}
	defer client.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, method, "http://cairn-up"+path, nil)
	if err != nil {
		return MemberChange{}, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return MemberChange{}, fmt.Errorf("no `cairn up` runs in %s (%w)", dataDir, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return MemberChange{}, fmt.Errorf("reading cairn up's answer: %w", err)
	}
	var change MemberChange
	if err := json.Unmarshal(raw, &change); err != nil {
		return MemberChange{}, fmt.Errorf("cairn up answered %s: %q", resp.Status, raw)
	}
	if change.Error != "" {
		return change, errors.New(change.Error)
	}
	return change, nil
}
