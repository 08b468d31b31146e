// Package servers is the environment contract naming the servers dlock's
// tests, benchmarks and programs use; each defaults to the local server on
// its standard port.
package servers

import (
	"os"
	"strings"
)

// Environment variables and their defaults.
const (
	PostgresEnv = "DLOCK_PG_DSN"
	MySQLEnv    = "DLOCK_MYSQL_DSN"
	RedisEnv    = "DLOCK_REDIS_ADDR"
	ZKEnv       = "DLOCK_ZK_ADDRS"
	EtcdEnv     = "DLOCK_ETCD_ENDPOINTS"

	DefaultPostgresDSN   = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
	DefaultMySQLDSN      = "root@tcp(127.0.0.1:3306)/test?parseTime=true"
	DefaultRedisAddr     = "127.0.0.1:6379"
	DefaultZKAddrs       = "127.0.0.1:2181"
	DefaultEtcdEndpoints = "127.0.0.1:2379"
)

func env(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// PostgresDSN is the PostgreSQL DSN.
func PostgresDSN() string { return env(PostgresEnv, DefaultPostgresDSN) }

// MySQLDSN is the MySQL/MariaDB DSN.
func MySQLDSN() string { return env(MySQLEnv, DefaultMySQLDSN) }

// RedisAddr is the Redis address.
func RedisAddr() string { return env(RedisEnv, DefaultRedisAddr) }

// ZKAddrs are the ZooKeeper addresses.
func ZKAddrs() []string { return strings.Split(env(ZKEnv, DefaultZKAddrs), ",") }

// EtcdEndpoints are the etcd client endpoints.
func EtcdEndpoints() []string { return strings.Split(env(EtcdEnv, DefaultEtcdEndpoints), ",") }

// Redact hides a password in a DSN so it never reaches a log or an error.
func Redact(dsn string) string {
	if i := strings.Index(dsn, "://"); i >= 0 {
		rest := dsn[i+3:]
		if at := strings.LastIndex(rest, "@"); at >= 0 {
			if c := strings.Index(rest[:at], ":"); c >= 0 {
				return dsn[:i+3] + rest[:c] + ":xxx" + rest[at:]
			}
		}
		return dsn
	}
	if at := strings.LastIndex(dsn, "@"); at >= 0 {
		if c := strings.Index(dsn[:at], ":"); c >= 0 {
			return dsn[:c] + ":xxx" + dsn[at:]
		}
	}
	return dsn
}
