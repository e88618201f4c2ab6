// A MoonBridge backend written for busbar's tests: plain JDK, Java 8
// (javac --release 8), speaking protocol version 3 byte by byte as
// docs/moonbridge.md describes it. It proves the bytes from a JVM: it
// registers with the HMAC, sends, requests and publishes, then answers
// what busbar sends it. Each step prints one line the Go test checks.
//
// usage: java MoonBridgeProbe HOST PORT NAME KEY_ID SECRET
import java.io.ByteArrayOutputStream;
import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.IOException;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.util.UUID;
import javax.crypto.Mac;
import javax.crypto.spec.SecretKeySpec;

public final class MoonBridgeProbe {
    static final int VERSION = 3;
    static final int HELLO = 1, REGISTER = 2, REGISTERED = 3, HEARTBEAT = 4, PONG = 5, GOODBYE = 6;
    static final int MESSAGE = 9, RESPONSE = 10;
    static final int EVENT = 1, REQUEST = 2, REPLY = 3;
    static final int R_SEND = 1, R_REPLY = 2, R_PUBLISH = 3, R_ERROR = 4;
    static final String[] RESULTS = {"", "ACCEPTED", "NO_SUBSCRIBER", "NOT_CONNECTED", "BACKPRESSURED", "REJECTED", "TIMED_OUT", "FAILED"};
    static final String[] CODES = {"", "NOT_CONNECTED", "NO_HANDLER", "BACKPRESSURED", "TIMED_OUT", "CLOSED", "REJECTED", "HANDLER_FAILED", "PROTOCOL_ERROR"};
    static final int MAX_FRAME = 66 * 1024;

    private final DataInputStream in;
    private final DataOutputStream out;
    private final String name;
    private long nextOp = 1;

    MoonBridgeProbe(Socket socket, String name) throws IOException {
        this.in = new DataInputStream(socket.getInputStream());
        this.out = new DataOutputStream(socket.getOutputStream());
        this.name = name;
    }

    // ---- framing

    byte[] readFrame() throws IOException {
        int n = in.readInt();
        if (n < 1 || n > MAX_FRAME) throw new IOException("frame length " + n);
        byte[] f = new byte[n];
        in.readFully(f);
        return f;
    }

    void writeFrame(byte[] f) throws IOException {
        out.writeInt(f.length);
        out.write(f);
        out.flush();
    }

    static void str(DataOutputStream o, String s) throws IOException {
        byte[] b = s.getBytes(StandardCharsets.UTF_8);
        o.writeShort(b.length);
        o.write(b);
    }

    static String str(DataInputStream i) throws IOException {
        byte[] b = new byte[i.readUnsignedShort()];
        i.readFully(b);
        return new String(b, StandardCharsets.UTF_8);
    }

    static void uuid(DataOutputStream o, UUID u) throws IOException {
        o.writeLong(u.getMostSignificantBits());
        o.writeLong(u.getLeastSignificantBits());
    }

    static UUID uuid(DataInputStream i) throws IOException {
        return new UUID(i.readLong(), i.readLong());
    }

    static DataInputStream body(byte[] f) {
        return new DataInputStream(new java.io.ByteArrayInputStream(f, 1, f.length - 1));
    }

    // endpoint: null name is the proxy
    static void endpoint(DataOutputStream o, String backend) throws IOException {
        o.writeBoolean(backend == null);
        if (backend != null) str(o, backend);
    }

    static String endpoint(DataInputStream i) throws IOException {
        return i.readBoolean() ? "proxy" : "backend(" + str(i) + ")";
    }

    // ---- messages

    static final class Msg {
        UUID id; int kind; String channel, source, target; UUID replyTo; byte[] payload;
    }

    static Msg readMessage(DataInputStream i) throws IOException {
        Msg m = new Msg();
        m.id = uuid(i);
        m.kind = i.readUnsignedByte();
        m.channel = str(i);
        m.source = endpoint(i);
        m.target = i.readBoolean() ? endpoint(i) : null;
        m.replyTo = i.readBoolean() ? uuid(i) : null;
        m.payload = new byte[i.readInt()];
        i.readFully(m.payload);
        return m;
    }

    // a MESSAGE: target null = publish, "" = the proxy, else a backend
    long message(int kind, String channel, String target, String payload) throws IOException {
        long op = nextOp++;
        ByteArrayOutputStream b = new ByteArrayOutputStream();
        DataOutputStream o = new DataOutputStream(b);
        o.writeByte(MESSAGE);
        o.writeLong(op);
        o.writeLong(5000);
        uuid(o, UUID.randomUUID());
        o.writeByte(kind);
        str(o, channel);
        endpoint(o, name);
        o.writeBoolean(target != null);
        if (target != null) endpoint(o, target.isEmpty() ? null : target);
        o.writeBoolean(false);
        byte[] p = payload.getBytes(StandardCharsets.UTF_8);
        o.writeInt(p.length);
        o.write(p);
        writeFrame(b.toByteArray());
        return op;
    }

    void sendResult(long op, int result) throws IOException {
        ByteArrayOutputStream b = new ByteArrayOutputStream();
        DataOutputStream o = new DataOutputStream(b);
        o.writeByte(RESPONSE);
        o.writeLong(op);
        o.writeByte(R_SEND);
        o.writeByte(result);
        writeFrame(b.toByteArray());
    }

    void reply(long op, Msg req, String payload) throws IOException {
        ByteArrayOutputStream b = new ByteArrayOutputStream();
        DataOutputStream o = new DataOutputStream(b);
        o.writeByte(RESPONSE);
        o.writeLong(op);
        o.writeByte(R_REPLY);
        uuid(o, UUID.randomUUID());
        o.writeByte(REPLY);
        str(o, req.channel);
        endpoint(o, name);
        o.writeBoolean(true);
        if (req.source.equals("proxy")) endpoint(o, null);
        else endpoint(o, req.source.substring("backend(".length(), req.source.length() - 1));
        o.writeBoolean(true);
        uuid(o, req.id);
        byte[] p = payload.getBytes(StandardCharsets.UTF_8);
        o.writeInt(p.length);
        o.write(p);
        writeFrame(b.toByteArray());
    }

    /** Reads frames until the RESPONSE to op, answering its own published copy NO_SUBSCRIBER. */
    String await(long op) throws IOException {
        while (true) {
            byte[] f = readFrame();
            DataInputStream i = body(f);
            if (f[0] == MESSAGE) {
                long theirs = i.readLong();
                i.readLong();
                readMessage(i);
                sendResult(theirs, 2);
                continue;
            }
            if (f[0] != RESPONSE) throw new IOException("unexpected frame " + f[0]);
            if (i.readLong() != op) throw new IOException("response to another operation");
            int type = i.readUnsignedByte();
            switch (type) {
                case R_SEND: return "SEND " + RESULTS[i.readUnsignedByte()];
                case R_REPLY: {
                    Msg r = readMessage(i);
                    return "REPLY " + new String(r.payload, StandardCharsets.UTF_8) + " from " + r.source;
                }
                case R_PUBLISH: {
                    uuid(i);
                    int n = i.readUnsignedShort();
                    java.util.TreeMap<String, String> res = new java.util.TreeMap<String, String>();
                    for (int k = 0; k < n; k++) {
                        String e = endpoint(i);
                        res.put(e, RESULTS[i.readUnsignedByte()]);
                    }
                    return "PUBLISH " + res;
                }
                case R_ERROR: return "ERROR " + CODES[i.readUnsignedByte()] + " " + str(i);
                default: throw new IOException("response type " + type);
            }
        }
    }

    void register(String keyId, String secret) throws Exception {
        byte[] hello = readFrame();
        DataInputStream h = body(hello);
        if (hello[0] != HELLO || h.readInt() != VERSION) throw new IOException("not a version 3 proxy");
        byte[] nonce = new byte[32];
        h.readFully(nonce);
        String instance = name, address = "tcp://127.0.0.1:25565", generation = UUID.randomUUID().toString();
        ByteArrayOutputStream canon = new ByteArrayOutputStream();
        DataOutputStream c = new DataOutputStream(canon);
        for (String s : new String[] {instance, name, address, generation, keyId}) str(c, s);
        Mac mac = Mac.getInstance("HmacSHA256");
        mac.init(new SecretKeySpec(secret.getBytes(StandardCharsets.UTF_8), "HmacSHA256"));
        mac.update(nonce);
        byte[] sig = mac.doFinal(canon.toByteArray());
        ByteArrayOutputStream b = new ByteArrayOutputStream();
        b.write(REGISTER);
        b.write(canon.toByteArray());
        b.write(sig);
        writeFrame(b.toByteArray());
        byte[] reg = readFrame();
        DataInputStream r = body(reg);
        if (reg[0] != REGISTERED) throw new IOException("not registered");
        long epoch = r.readLong();
        UUID proxyEpoch = uuid(r);
        System.out.println("REGISTERED epoch=" + epoch + " proxy=" + proxyEpoch);
    }

    /** Answers busbar: one request ("java:" + payload) and one event, then a heartbeat and GOODBYE. */
    void serve() throws IOException {
        int requests = 0, events = 0;
        while (requests < 1 || events < 1) {
            byte[] f = readFrame();
            if (f[0] != MESSAGE) throw new IOException("unexpected frame " + f[0]);
            DataInputStream i = body(f);
            long op = i.readLong();
            long timeout = i.readLong();
            Msg m = readMessage(i);
            if (timeout < 1 || timeout > 60000) throw new IOException("timeout " + timeout);
            String text = new String(m.payload, StandardCharsets.UTF_8);
            if (m.kind == REQUEST) {
                reply(op, m, "java:" + text);
                requests++;
                System.out.println("ANSWERED " + text + " from " + m.source);
            } else {
                sendResult(op, 1);
                events++;
                System.out.println("EVENT " + text + " from " + m.source + " to " + m.target);
            }
        }
        writeFrame(new byte[] {HEARTBEAT});
        byte[] pong = readFrame();
        if (pong.length != 1 || pong[0] != PONG) throw new IOException("no PONG");
        System.out.println("PONG");
        writeFrame(new byte[] {GOODBYE});
    }

    public static void main(String[] args) throws Exception {
        Socket s = new Socket(args[0], Integer.parseInt(args[1]));
        s.setSoTimeout(30000);
        MoonBridgeProbe p = new MoonBridgeProbe(s, args[2]);
        p.register(args[3], args[4]);
        System.out.println(p.await(p.message(EVENT, "mb:news", "listener", "from-java")));
        System.out.println(p.await(p.message(REQUEST, "mb:ask", "answerer", "q")));
        System.out.println(p.await(p.message(REQUEST, "mb:ask", "nobody", "q")));
        System.out.println(p.await(p.message(EVENT, "mb:news", null, "pub-java")));
        System.out.println("READY");
        System.out.flush();
        p.serve();
        s.close();
    }
}
