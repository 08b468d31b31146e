// Interop drives Curator's recipes for zklock's interoperability tests: one
// command per line on stdin, one reply per line on stdout.
//
//   acquire PATH MILLIS   InterProcessMutex on PATH (one per path, so a
//                         second acquire re-enters): "acquired MICROS" or
//                         "timeout"
//   release PATH          "released", or "error ..." if not held
//   lead PATH             a LeaderSelector on PATH: "leading MICROS" when
//                         it leads
//   resign PATH           its leadership ends: "resigned"
//
// MICROS is the wall clock in microseconds since the epoch. The arguments
// are the connect string and the session timeout in milliseconds.
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.time.Instant;
import java.time.temporal.ChronoUnit;
import java.util.HashMap;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.leader.LeaderSelector;
import org.apache.curator.framework.recipes.leader.LeaderSelectorListenerAdapter;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.retry.RetryNTimes;

public class Interop {
    static synchronized void reply(String line) {
        System.out.println(line);
        System.out.flush();
    }

    static long micros() {
        return ChronoUnit.MICROS.between(Instant.EPOCH, Instant.now());
    }

    public static void main(String[] args) throws Exception {
        int session = Integer.parseInt(args[1]);
        CuratorFramework client = CuratorFrameworkFactory.builder()
            .connectString(args[0])
            .sessionTimeoutMs(session)
            .connectionTimeoutMs(session)
            .retryPolicy(new RetryNTimes(100, 100))
            .build();
        client.start();
        if (!client.blockUntilConnected(30, TimeUnit.SECONDS)) {
            reply("error not connected");
            return;
        }
        Map<String, InterProcessMutex> mutexes = new HashMap<>();
        Map<String, CountDownLatch> leaderships = new HashMap<>();
        Map<String, LeaderSelector> selectors = new HashMap<>();
        reply("ready");
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        for (String line; (line = in.readLine()) != null; ) {
            String[] f = line.trim().split(" ");
            try {
                switch (f[0]) {
                case "acquire": {
                    InterProcessMutex m = mutexes.computeIfAbsent(f[1], p -> new InterProcessMutex(client, p));
                    reply(m.acquire(Long.parseLong(f[2]), TimeUnit.MILLISECONDS) ? "acquired " + micros() : "timeout");
                    break;
                }
                case "release":
                    mutexes.get(f[1]).release();
                    reply("released");
                    break;
                case "lead": {
                    CountDownLatch end = new CountDownLatch(1);
                    leaderships.put(f[1], end);
                    LeaderSelector s = new LeaderSelector(client, f[1], new LeaderSelectorListenerAdapter() {
                        @Override
                        public void takeLeadership(CuratorFramework c) throws Exception {
                            reply("leading " + micros());
                            end.await();
                        }
                    });
                    selectors.put(f[1], s);
                    s.start();
                    break;
                }
                case "resign":
                    leaderships.get(f[1]).countDown();
                    selectors.get(f[1]).close();
                    reply("resigned");
                    break;
                default:
                    reply("error unknown command " + f[0]);
                }
            } catch (Exception e) {
                reply("error " + e);
            }
        }
        client.close();
    }
}
