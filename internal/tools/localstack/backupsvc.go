package localstack

import (
	"strconv"
	"strings"
	"time"
)

// backupService runs `cairn backup` when the stack has a BackupDir: snapshots through the frontends, kept in
// BackupDir.
func backupService() service {
	return service{
		name: "backup", single: true, count: (*plan).backups, ports: []string{"metrics"},
		args: func(p *plan, _ int) []string {
			endpoints := make([]string, p.frontends())
			for i := range endpoints {
				endpoints[i] = p.clientURL(i + 1)
			}
			interval := p.cfg.BackupInterval
			if interval <= 0 {
				interval = 30 * time.Minute
			}
			keep := p.cfg.BackupKeep
			if keep <= 0 {
				keep = 48
			}
			args := []string{"--endpoints", strings.Join(endpoints, ","), "--dir", p.cfg.BackupDir,
				"--interval", interval.String(), "--keep", strconv.Itoa(keep)}
			t := p.cfg.ClientTLS // the frontends' own certificate identifies the backup to them, as etcd's gateway does
			if t.Empty() && p.tls() {
				t = p.files(ClientCertName) // cairn up --tls: the stack's client certificate
			}
			if !t.Empty() {
				args = append(args, "--cert", t.CertFile, "--key", t.KeyFile)
				if t.TrustedCAFile != "" {
					args = append(args, "--cacert", t.TrustedCAFile)
				}
			}
			return args
		},
		dependsOn: func(p *plan, _ int) []string {
			names := make([]string, p.frontends())
			for i := range names {
				names[i] = p.child("frontend", i+1)
			}
			return names
		},
	}
}

func (p *plan) backups() int {
	if p.cfg.BackupDir == "" {
		return 0
	}
	return 1
}
