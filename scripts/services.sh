#!/usr/bin/env bash
# Makes the servers dlock's tests and demo need reachable on this machine.
#
#   scripts/services.sh up           PostgreSQL, MariaDB/MySQL, Redis, ZooKeeper, etcd
#   scripts/services.sh zk-ensemble  a 3-node ZooKeeper ensemble (2191-2193)
#   scripts/services.sh etcd-cluster a 3-member etcd cluster (clients 2391-2393)
#   scripts/services.sh redis-extra five Redis servers for Redlock (6380-6384)
#   scripts/services.sh galera      a 3-node MariaDB Galera cluster (3311-3313)
#   scripts/services.sh promtool    Prometheus's promtool, for docs/alerts.yml
#   scripts/services.sh curator     Curator's recipes for Java, for zklock's
#                                   interoperability tests
#   scripts/services.sh pgbouncer   PgBouncer before PostgreSQL: session
#                                   pooling on 6432, transaction on 6433,
#                                   statement on 6434
#   scripts/services.sh status      which ports answer
#   scripts/services.sh down        stops what this script started
#
# Idempotent: a server already answering on its port is left alone. Only
# loopback addresses are used. State lives under $DLOCK_SERVICES_DIR
# (default /tmp/dlock-services).
set -euo pipefail

DIR="${DLOCK_SERVICES_DIR:-/tmp/dlock-services}"
mkdir -p "$DIR"
chmod go+x "$DIR" 2>/dev/null || true # servers run as postgres or mysql, whatever the umask

log() { printf 'services: %s\n' "$*" >&2; }

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

wait_port() { # port name seconds
	local i
	for ((i = 0; i < $3 * 10; i++)); do
		port_open "$1" && return 0
		sleep 0.1
	done
	log "$2 did not answer on 127.0.0.1:$1 within $3s"
	return 1
}

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo -n "$@"; fi; }

# deb_install [--lean] WHAT PACKAGE...: installs Debian's packages
# (without their recommendations if --lean; apt-get update once if the
# first try fails), logging to $DIR/apt-PACKAGE.log.
deb_install() {
	local lean=()
	if [ "$1" = --lean ]; then
		lean=(--no-install-recommends)
		shift
	fi
	local what=$1
	shift
	local apt_log="$DIR/apt-$1.log"
	if [ "$(id -u)" != 0 ] && ! sudo -n true 2>/dev/null; then
		log "$what is not installed and this is not root: apt-get install $*"
		return 1
	fi
	log "installing Debian's $* package(s)"
	as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${lean[@]}" "$@" >"$apt_log" 2>&1 ||
		{ as_root apt-get update -q >>"$apt_log" 2>&1 &&
			as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${lean[@]}" "$@" >>"$apt_log" 2>&1; } ||
		{ log "apt-get install $* failed, see $apt_log"; return 1; }
}

postgres_up() {
	port_open 5432 && return 0
	if command -v pg_ctlcluster >/dev/null; then
		local v
		v=$(ls /etc/postgresql | sort -V | tail -1)
		log "starting PostgreSQL $v"
		as_root pg_ctlcluster --skip-systemctl-redirect "$v" main start
	else
		log "PostgreSQL is not installed (apt-get install postgresql)"
		return 1
	fi
	wait_port 5432 PostgreSQL 30
}

mysql_up() {
	port_open 3306 && return 0
	if [ -x /usr/sbin/mariadbd ]; then
		log "starting MariaDB"
		as_root start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd
	elif [ -x /usr/sbin/mysqld ]; then
		log "starting MySQL"
		as_root start-stop-daemon --start --oknodo --background --exec /usr/sbin/mysqld
	else
		log "MariaDB/MySQL is not installed (apt-get install mariadb-server)"
		return 1
	fi
	wait_port 3306 MariaDB 60
}

redis_start() { # port
	port_open "$1" && return 0
	command -v redis-server >/dev/null || { log "redis-server is not installed (apt-get install redis-server)"; return 1; }
	log "starting Redis on $1"
	mkdir -p "$DIR/redis-$1"
	redis-server --daemonize yes --bind 127.0.0.1 --port "$1" --save "" --appendonly no \
		--dir "$DIR/redis-$1" --logfile "$DIR/redis-$1/redis.log" --pidfile "$DIR/redis-$1/redis.pid"
	wait_port "$1" Redis 10
}

zk_install() {
	[ -f /usr/share/java/zookeeper.jar ] && return 0
	deb_install ZooKeeper zookeeper
}

# zk_start NAME CLIENT_PORT [SERVERS...]: one ZooKeeper JVM with its own
# config and data dir. SERVERS are "id:peer:election" for an ensemble.
zk_start() {
	local name=$1 port=$2 id=${3:-}
	shift 3 || shift $#
	port_open "$port" && return 0
	local d="$DIR/$name"
	rm -rf "$d" && mkdir -p "$d/data"
	cat >"$d/zoo.cfg" <<-EOF
		tickTime=200
		minSessionTimeout=400
		maxSessionTimeout=30000
		initLimit=50
		syncLimit=25
		dataDir=$d/data
		clientPort=$port
		clientPortAddress=127.0.0.1
		admin.enableServer=false
		4lw.commands.whitelist=ruok,srvr,stat,mntr,cons
		maxClientCnxns=0
	EOF
	if [ -n "$id" ]; then
		echo "$id" >"$d/data/myid"
		local s
		for s in "$@"; do
			IFS=: read -r sid peer election <<<"$s"
			echo "server.$sid=127.0.0.1:$peer:$election" >>"$d/zoo.cfg"
		done
	fi
	local cp="$d:/etc/zookeeper/conf:/usr/share/java/zookeeper.jar:/usr/share/java/slf4j-simple.jar"
	for jar in /usr/share/java/zookeeper-jute.jar /usr/share/java/netty*.jar /usr/share/java/slf4j-api.jar /usr/share/java/commons-cli.jar /usr/share/java/jline.jar /usr/share/java/metrics-core.jar /usr/share/java/snappy-java.jar /usr/share/java/audience-annotations.jar; do
		[ -f "$jar" ] && cp="$cp:$jar"
	done
	log "starting ZooKeeper $name on $port"
	# Lock directories are container nodes: the server deletes one once its
	# last child is gone, at its container check. Checked every second and
	# without the default cap of 10,000 a minute, so a name leaves nothing
	# behind within moments, however many names are used.
	nohup java -Xmx256m -Dzookeeper.log.dir="$d" \
		-Dznode.container.checkIntervalMs=1000 -Dznode.container.maxPerMinute=1000000 -cp "$cp" \
		org.apache.zookeeper.server.quorum.QuorumPeerMain "$d/zoo.cfg" >"$d/zk.log" 2>&1 </dev/null &
	echo $! >"$d/pid"
}

zk_ok() { # port
	local r
	r=$( (exec 3<>"/dev/tcp/127.0.0.1/$1" && printf ruok >&3 && timeout 2 cat <&3) 2>/dev/null || true)
	[ "$r" = imok ]
}

zk_wait() { # port seconds
	local i
	for ((i = 0; i < $2 * 10; i++)); do
		zk_ok "$1" && return 0
		sleep 0.1
	done
	log "ZooKeeper did not answer ruok on 127.0.0.1:$1 within $2s (logs in $DIR)"
	return 1
}

zk_up() {
	zk_ok 2181 && return 0
	zk_install
	zk_start zk 2181 ""
	zk_wait 2181 60
}

zk_ensemble() {
	zk_install
	local servers=(1:2891:3891 2:2892:3892 3:2893:3893) i
	for i in 1 2 3; do
		zk_start "zk-ens$i" "219$i" "$i" "${servers[@]}"
	done
	for i in 1 2 3; do zk_wait "219$i" 90; done
}

etcd_install() {
	command -v etcd >/dev/null && return 0
	deb_install etcd etcd-server
}

# etcd_start NAME CLIENT_PORT PEER_PORT [CLUSTER]: one etcd member with its
# own data dir. CLUSTER is etcd's --initial-cluster for a cluster member;
# without it, a single-member cluster. Heartbeat and election timeout are
# etcd's defaults (100 ms, 1 s), as a deployment has them.
etcd_start() {
	local name=$1 port=$2 peer=$3 cluster=${4:-} token=dlock-etcd-cluster
	port_open "$port" && return 0
	local d="$DIR/$name"
	[ -n "$cluster" ] || { cluster="$name=http://127.0.0.1:$peer"; token="dlock-$name"; }
	mkdir -p "$d"
	local state=new
	[ -d "$d/data/member" ] && state=existing
	log "starting etcd $name on $port"
	nohup etcd --name "$name" --data-dir "$d/data" \
		--listen-client-urls "http://127.0.0.1:$port" --advertise-client-urls "http://127.0.0.1:$port" \
		--listen-peer-urls "http://127.0.0.1:$peer" --initial-advertise-peer-urls "http://127.0.0.1:$peer" \
		--initial-cluster "$cluster" --initial-cluster-state "$state" --initial-cluster-token "$token" \
		--log-level error >"$d/etcd.log" 2>&1 </dev/null &
	echo $! >"$d/pid"
}

etcd_up() {
	port_open 2379 && return 0
	etcd_install
	etcd_start etcd 2379 2380
	wait_port 2379 etcd 30
}

etcd_cluster() {
	etcd_install
	local cluster="etcd-m1=http://127.0.0.1:2491,etcd-m2=http://127.0.0.1:2492,etcd-m3=http://127.0.0.1:2493" i
	for i in 1 2 3; do
		etcd_start "etcd-m$i" "239$i" "249$i" "$cluster"
	done
	for i in 1 2 3; do wait_port "239$i" etcd 30; done
}

pgbouncer_install() {
	command -v pgbouncer >/dev/null && return 0
	deb_install PgBouncer pgbouncer
}

# pgbouncer_start MODE PORT: a PgBouncer with pool_mode MODE on PORT in
# front of the PostgreSQL on 5432 (trust, as the server is), every
# database passed through. The pool is small (as production's is, to the
# server's connection limit), so clients share server connections.
pgbouncer_start() {
	local mode=$1 port=$2
	port_open "$port" && return 0
	local d="$DIR/pgbouncer-$mode"
	mkdir -p "$d"
	printf '"postgres" ""\n"root" ""\n' >"$d/users.txt"
	cat >"$d/pgbouncer.ini" <<EOF
[databases]
* = host=127.0.0.1 port=5432

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $port
unix_socket_dir =
auth_type = trust
auth_file = $d/users.txt
pool_mode = $mode
default_pool_size = 20
max_client_conn = 400
ignore_startup_parameters = extra_float_digits,search_path
logfile = $d/pgbouncer.log
pidfile = $d/pid
EOF
	log "starting PgBouncer ($mode pooling) on $port"
	local user=()
	if [ "$(id -u)" = 0 ]; then
		user=(-u postgres)
		chown -R postgres "$d"
	fi
	pgbouncer -d "${user[@]}" "$d/pgbouncer.ini" >"$d/start.log" 2>&1 9>&- ||
		{ log "PgBouncer did not start, see $d/start.log"; return 1; }
}

pgbouncer_up() {
	exec 9>"$DIR/pgbouncer.lock" # test packages may start them at once
	flock -w 300 9 || { log "another start of PgBouncer holds $DIR/pgbouncer.lock"; return 1; }
	pgbouncer_install
	pgbouncer_start session 6432
	pgbouncer_start transaction 6433
	pgbouncer_start statement 6434
	wait_port 6432 PgBouncer 30 && wait_port 6433 PgBouncer 30 && wait_port 6434 PgBouncer 30
}

# galera_start N [--wsrep-new-cluster]: node N of a 3-node MariaDB Galera
# cluster: SQL on 331N, group communication on 457N, IST on 458N, rsync
# state transfer on 459N. The nodes run as user mysql, so the rsync state
# transfer can write their data directories.
galera_start() {
	local n=$1 port=331$1 d="$DIR/galera-$1"
	shift
	port_open "$port" && return 0
	mkdir -p "$d"
	cat >"$d/my.cnf" <<EOF
[mysqld]
user = mysql
datadir = $d/data
socket = $d/mysqld.sock
pid-file = $d/pid
log-error = $d/error.log
port = $port
bind-address = 127.0.0.1
skip-name-resolve
binlog_format = ROW
default_storage_engine = InnoDB
innodb_autoinc_lock_mode = 2
innodb_buffer_pool_size = 64M
innodb_log_file_size = 32M
wsrep_on = ON
wsrep_provider = /usr/lib/galera/libgalera_smm.so
wsrep_cluster_name = dlock_galera
wsrep_cluster_address = gcomm://127.0.0.1:4571,127.0.0.1:4572,127.0.0.1:4573
wsrep_node_name = galera-$n
wsrep_node_address = 127.0.0.1:457$n
wsrep_provider_options = "gmcast.listen_addr=tcp://127.0.0.1:457$n;ist.recv_addr=127.0.0.1:458$n;evs.suspect_timeout=PT5S;evs.inactive_timeout=PT10S"
wsrep_sst_method = rsync
wsrep_sst_receive_address = 127.0.0.1:459$n
EOF
	if [ ! -d "$d/data/mysql" ]; then
		mkdir -p "$d/data"
		chown -R mysql:mysql "$d"
		mariadb-install-db --defaults-file="$d/my.cnf" --user=mysql --auth-root-authentication-method=normal >"$d/install.log" 2>&1 ||
			{ log "mariadb-install-db failed, see $d/install.log"; return 1; }
	fi
	chown -R mysql:mysql "$d"
	log "starting MariaDB Galera node $n on $port"
	# 9>&-: the server must not inherit galera_up's lock, or it holds it
	# for as long as it runs and the next galera_up waits for ever.
	nohup mariadbd --defaults-file="$d/my.cnf" "$@" >"$d/mariadbd.out" 2>&1 </dev/null 9>&- &
}

galera_install() {
	[ -f /usr/lib/galera/libgalera_smm.so ] && command -v mariadbd >/dev/null && command -v rsync >/dev/null && return 0
	deb_install Galera galera-4 mariadb-server rsync
}

# galera_up: the cluster's first node bootstraps it (unless a node
# answers already), gets a root user for 127.0.0.1 and database test, and
# the other two join it by state transfer.
galera_up() {
	if [ "$(id -u)" != 0 ]; then
		log "the Galera nodes run as user mysql: run this as root"
		return 1
	fi
	exec 9>"$DIR/galera.lock" # test packages may start it at once
	flock -w 300 9 || { log "another start of the Galera cluster holds $DIR/galera.lock"; return 1; }
	galera_install
	if ! port_open 3311 && ! port_open 3312 && ! port_open 3313; then
		# No node runs: node 1 starts the cluster again. After a kill -9 of
		# every node (or of the machine) none is marked safe to bootstrap,
		# and a throwaway test cluster need not ask which one saw the last
		# write: node 1 does, the others join it by state transfer.
		local state="$DIR/galera-1/data/grastate.dat"
		[ -f "$state" ] && sed -i 's/^safe_to_bootstrap: 0$/safe_to_bootstrap: 1/' "$state"
		galera_start 1 --wsrep-new-cluster
		galera_wait 1 60 || return 1
		mariadb -S "$DIR/galera-1/mysqld.sock" -uroot -e "CREATE USER IF NOT EXISTS root@'127.0.0.1'; GRANT ALL ON *.* TO root@'127.0.0.1' WITH GRANT OPTION; CREATE DATABASE IF NOT EXISTS test" ||
			{ log "setting up Galera node 1 failed"; return 1; }
	fi
	local i
	for i in 1 2 3; do galera_start "$i"; done
	for i in 1 2 3; do galera_wait "$i" 120 || return 1; done
}

# galera_wait N SECONDS: node N answers, or its error log says why not.
galera_wait() {
	wait_port "331$1" "Galera node $1" "$2" && return 0
	log "the last lines of $DIR/galera-$1/error.log:"
	tail -n 8 "$DIR/galera-$1/error.log" >&2
	return 1
}

# promtool_install: Prometheus's promtool (Debian's prometheus package),
# which the tests run on docs/alerts.yml.
promtool_install() {
	command -v promtool >/dev/null && return 0
	deb_install --lean promtool prometheus
}

# curator_install: Curator's recipes for Java (Debian's
# libcurator-recipes-java), which zklock's interoperability tests run.
curator_install() {
	[ -f /usr/share/java/curator-recipes.jar ] && command -v java >/dev/null && return 0
	deb_install --lean Curator libcurator-recipes-java default-jre-headless
}

redis_extra() {
	local p
	for p in 6380 6381 6382 6383 6384; do redis_start "$p"; done
}

status() {
	local p
	for p in 5432 3306 6379 2181 2191 2192 2193 2379 2391 2392 2393 6432 6433 6434 3311 3312 3313 6380 6381 6382 6383 6384; do
		if port_open "$p"; then echo "127.0.0.1:$p up"; else echo "127.0.0.1:$p down"; fi
	done
}

down() {
	local f
	for f in "$DIR"/*/pid "$DIR"/redis-*/redis.pid; do
		[ -f "$f" ] || continue
		kill "$(cat "$f")" 2>/dev/null || true
		rm -f "$f"
	done
}

case "${1:-up}" in
up)
	postgres_up
	mysql_up
	redis_start 6379
	zk_up
	etcd_up
	;;
zk-ensemble) zk_ensemble ;;
etcd-cluster) etcd_cluster ;;
redis-extra) redis_extra ;;
pgbouncer) pgbouncer_up ;;
galera) galera_up ;;
promtool) promtool_install ;;
curator) curator_install ;;
status) status ;;
down) down ;;
*)
	echo "usage: $0 up|zk-ensemble|etcd-cluster|redis-extra|pgbouncer|galera|promtool|curator|status|down" >&2
	exit 2
	;;
esac
