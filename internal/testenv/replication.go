package testenv

import (
	"fmt"
	"net"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
)

// Replicated is a primary and a standby of throwaway servers (PostgreSQL
// streaming replication, MariaDB replication) on loopback, reached through
// a proxy that Failover points at the promoted standby, as a virtual IP or
// a pooler would.
type Replicated struct {
	// DSN reaches the primary's test database through the proxy.
	Driver, DSN      string
	Primary, Standby *SQLServer
	proxy            *Proxy
	// link carries replication from primary to standby, so Lag can hold
	// it back.
	link    *Proxy
	promote func(t testing.TB)
}

// Lag holds back replication: the standby stops receiving the primary's
// changes (they wait in the link, not in the standby's socket, and are
// dropped with the primary) until Failover. With a synchronous standby,
// commits then wait.
func (r *Replicated) Lag() { r.link.Blackhole() }

// Failover kills the primary (SIGKILL of every process: nothing more
// reaches the standby), drops what Lag held back, promotes it with what it has, and points the proxy at it.
func (r *Replicated) Failover(t testing.TB) {
	t.Helper()
	r.Primary.Kill()
	r.link.Cut() // drops what Lag held back
	r.link.Restore()
	r.promote(t)
	r.proxy.Retarget("127.0.0.1:" + strconv.Itoa(r.Standby.port))
	r.Primary, r.Standby = r.Standby, nil
}

// viaProxy is dsn (of driver) with its host replaced by addr.
func viaProxy(t testing.TB, driver, dsn, addr string) string {
	t.Helper()
	if driver == "pgx" {
		u, err := url.Parse(dsn)
		if err != nil {
			t.Fatal(err)
		}
		u.Host = addr
		return u.String()
	}
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Addr = addr
	return cfg.FormatDSN()
}

// PostgresReplicated starts a PostgreSQL primary and a streaming standby
// made with pg_basebackup. With sync, the standby is synchronous
// (synchronous_standby_names = '*'): a commit returns once the standby
// has flushed it, so a promotion loses no committed transaction.
func PostgresReplicated(t testing.TB, sync bool) *Replicated {
	t.Helper()
	pg := newPostgresInstall(t)
	data := pg.dir + "/primary"
	if out, err := pg.command("initdb", "-D", data, "-A", "trust", "-U", "postgres", "--no-sync").CombinedOutput(); err != nil {
		t.Fatalf("initdb: %v\n%s", err, out)
	}
	primary := pg.start(t, data, "wal_level=replica", "max_wal_senders=4")
	link := NewProxy(t, "127.0.0.1:"+strconv.Itoa(primary.port))
	_, lport, _ := net.SplitHostPort(link.Addr())
	standbyData := pg.dir + "/standby"
	// Through the link: -R writes its address as the primary's.
	if out, err := pg.command("pg_basebackup", "-h", "127.0.0.1", "-p", lport, "-U", "postgres",
		"-D", standbyData, "-R", "-X", "stream", "--no-sync").CombinedOutput(); err != nil {
		t.Fatalf("pg_basebackup: %v\n%s", err, out)
	}
	standby := pg.start(t, standbyData, "hot_standby=on")
	want := "async"
	if sync {
		want = "sync"
		if _, err := primary.Exec("ALTER SYSTEM SET synchronous_standby_names = '*'"); err != nil {
			t.Fatal(err)
		}
		if _, err := primary.Exec("SELECT pg_reload_conf()"); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "the standby streams ("+want+")", func() (bool, error) {
		row, err := primary.Query("SELECT state, sync_state FROM pg_stat_replication")
		return row != nil && row["state"] == "streaming" && row["sync_state"] == want, err
	})
	proxy := NewProxy(t, "127.0.0.1:"+strconv.Itoa(primary.port))
	r := &Replicated{Driver: "pgx", DSN: viaProxy(t, "pgx", primary.DSN, proxy.Addr()), Primary: primary, Standby: standby,
		proxy: proxy, link: link}
	r.promote = func(t testing.TB) {
		t.Helper()
		if _, err := r.Standby.Exec("SELECT pg_promote(true, 60)"); err != nil {
			t.Fatalf("promote the standby: %v", err)
		}
	}
	return r
}

// MariaDBReplicated starts a MariaDB primary (binary log, row format) and
// a replica of it (GTID replication), with the database test on both.
// Replication is asynchronous.
func MariaDBReplicated(t testing.TB) *Replicated {
	t.Helper()
	primary := mariadbServer(t, "--server-id=1", "--log-bin=primary", "--binlog-format=ROW")
	replica := mariadbServer(t, "--server-id=2", "--skip-log-bin")
	if _, err := primary.Exec("CREATE DATABASE test"); err != nil {
		t.Fatal(err)
	}
	link := NewProxy(t, "127.0.0.1:"+strconv.Itoa(primary.port))
	_, lport, _ := net.SplitHostPort(link.Addr())
	if _, err := replica.Exec(fmt.Sprintf("CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT=%s, MASTER_USER='root', "+
		"MASTER_PASSWORD='', MASTER_USE_GTID=slave_pos, MASTER_CONNECT_RETRY=1", lport)); err != nil {
		t.Fatal(err)
	}
	if _, err := replica.Exec("START SLAVE"); err != nil {
		t.Fatal(err)
	}
	proxy := NewProxy(t, "127.0.0.1:"+strconv.Itoa(primary.port))
	r := &Replicated{Driver: "mysql", DSN: viaProxy(t, "mysql", primary.DSN, proxy.Addr()), Primary: primary, Standby: replica,
		proxy: proxy, link: link}
	r.WaitReplicated(t)
	r.promote = func(t testing.TB) {
		t.Helper()
		if _, err := r.Standby.Exec("STOP SLAVE IO_THREAD"); err != nil {
			t.Fatal(err)
		}
		// Apply what the replica received before the primary died.
		waitFor(t, "the replica applies its relay log", func() (bool, error) {
			row, err := r.Standby.Query("SHOW SLAVE STATUS")
			return row != nil && row["Relay_Master_Log_File"] == row["Master_Log_File"] &&
				row["Exec_Master_Log_Pos"] == row["Read_Master_Log_Pos"], err
		})
		for _, stmt := range []string{"STOP SLAVE", "RESET SLAVE ALL"} {
			if _, err := r.Standby.Exec(stmt); err != nil {
				t.Fatal(err)
			}
		}
	}
	return r
}

// WaitReplicated waits until the standby has applied everything the
// primary has committed (MariaDB: the GTID positions match; PostgreSQL:
// the standby has replayed the primary's current WAL position).
func (r *Replicated) WaitReplicated(t testing.TB) {
	t.Helper()
	if r.Driver == "pgx" {
		row, err := r.Primary.Query("SELECT pg_current_wal_lsn()::text AS lsn")
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the standby replays the primary's WAL", func() (bool, error) {
			row, err := r.Standby.Query("SELECT pg_last_wal_replay_lsn() >= $1::pg_lsn AS ok", row["lsn"])
			return row != nil && row["ok"] == "true", err
		})
		return
	}
	row, err := r.Primary.Query("SELECT @@gtid_binlog_pos AS pos")
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the replica applies the primary's binary log", func() (bool, error) {
		// A replica whose SQL thread stopped on an error never catches up.
		if status, err := r.Standby.Query("SHOW SLAVE STATUS"); err == nil && status != nil && status["Last_SQL_Errno"] != "0" {
			t.Fatalf("the replica stopped applying the primary's binary log: %s", status["Last_SQL_Error"])
		}
		got, err := r.Standby.Query("SELECT @@gtid_slave_pos AS pos")
		return got != nil && got["pos"] == row["pos"], err
	})
}

// waitFor polls ready every 50ms for up to a minute.
func waitFor(t testing.TB, what string, ready func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		ok, err := ready()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within a minute (%v)", what, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
