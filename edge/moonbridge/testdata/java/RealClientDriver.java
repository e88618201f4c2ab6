import dev.moonbridge.backendchannel.BackendChannelClient;
import dev.moonbridge.messaging.Endpoint;
import dev.moonbridge.messaging.Message;
import dev.moonbridge.messaging.MessageChannel;
import dev.moonbridge.messaging.Messaging;
import dev.moonbridge.messaging.MessagingException;
import dev.moonbridge.messaging.PublishResult;
import dev.moonbridge.messaging.SendReceipt;

import java.nio.charset.StandardCharsets;
import java.util.UUID;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;

// Drives MoonBridge's own BackendChannelClient (compiled from a MoonBridge
// checkout, unchanged) against busbar serve --moonbridge: registers, sends,
// requests and publishes to busbar nodes, answers a request and hears an
// event from them, then closes its plugin scope and the client. Run by
// scripts/moonbridge-real-client, by hand (not in CI: it needs MoonBridge's
// sources). usage: java RealClientDriver HOST PORT NAME KEY_ID SECRET
public final class RealClientDriver {
    static String s(byte[] b) { return new String(b, StandardCharsets.UTF_8); }
    static byte[] b(String s) { return s.getBytes(StandardCharsets.UTF_8); }

    public static void main(String[] a) throws Exception {
        BackendChannelClient c = new BackendChannelClient(a[0], Integer.parseInt(a[1]), a[2], a[2],
                "tcp://127.0.0.1:25565", UUID.randomUUID().toString(), a[3], b(a[4]), 1000L, 100L, 1000L);
        if (!c.awaitRegistered(10, TimeUnit.SECONDS)) throw new IllegalStateException("not registered");
        System.out.println("REGISTERED epoch=" + c.getEpoch() + " proxyEpoch=" + c.getProxyEpoch());
        Messaging plugin = c.messaging("probe-plugin");
        final CountDownLatch answered = new CountDownLatch(1), heard = new CountDownLatch(1);
        plugin.channel("mb:ask").onRequest(req -> {
            System.out.println("ANSWERING " + s(req.payload()) + " from " + req.source() + " id=" + req.id());
            answered.countDown();
            return CompletableFuture.completedFuture(b("plugin:" + s(req.payload())));
        });
        MessageChannel news = plugin.channel("mb:news");
        news.subscribe(m -> {
            System.out.println("EVENT " + s(m.payload()) + " from " + m.source() + " to " + m.target());
            if (s(m.payload()).equals("hi")) heard.countDown();
        });
        SendReceipt r = news.send(Endpoint.backend("listener"), b("from-real")).toCompletableFuture().get();
        System.out.println("SEND " + r.result());
        System.out.println("SEND-NONE " + news.send(Endpoint.backend("nobody"), b("x")).toCompletableFuture().get().result());
        Message reply = plugin.channel("mb:ask").request(Endpoint.backend("answerer"), b("q")).toCompletableFuture().get();
        System.out.println("REPLY " + s(reply.payload()) + " from " + reply.source() + "");
        try {
            plugin.channel("mb:nohandler").request(Endpoint.backend("answerer"), b("q")).toCompletableFuture().get();
            System.out.println("NO ERROR");
        } catch (ExecutionException e) {
            System.out.println("ERROR " + ((MessagingException) e.getCause()).code());
        }
        Message self = plugin.channel("mb:ask").request(Endpoint.backend(a[2]), b("me")).toCompletableFuture().get();
        System.out.println("SELF " + s(self.payload()));
        PublishResult p = news.publish(b("pub-real")).toCompletableFuture().get();
        System.out.println("PUBLISH " + new java.util.TreeMap<String, Object>(toStrings(p)));
        System.out.println("READY");
        System.out.flush();
        if (!answered.await(30, TimeUnit.SECONDS) || !heard.await(30, TimeUnit.SECONDS)) throw new IllegalStateException("busbar did not reach the plugin");
        plugin.close();
        try {
            news.send(Endpoint.backend("listener"), b("after-close")).toCompletableFuture().get();
            System.out.println("SENT AFTER CLOSE");
        } catch (Exception e) {
            System.out.println("AFTER-CLOSE " + e);
        }
        c.close();
        System.out.println("DONE");
    }

    static java.util.Map<String, Object> toStrings(PublishResult p) {
        java.util.Map<String, Object> m = new java.util.HashMap<String, Object>();
        for (java.util.Map.Entry<Endpoint, ?> e : p.results().entrySet()) m.put(e.getKey().toString(), e.getValue());
        return m;
    }
}
