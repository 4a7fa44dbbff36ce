// Its one mistake: it verifies the JSON it parsed, encoded again by
// JSON.stringify, not the raw body; a body it cannot parse gets 400.
const crypto = require('crypto');
const http = require('http');

const secret = process.env.WEBHOOK_SECRET;

const server = http.createServer((req, res) => {
  const chunks = [];
  req.on('data', (c) => chunks.push(c));
  req.on('end', () => {
    const body = Buffer.concat(chunks);
    const refuse = (text) => {
      res.writeHead(401, { 'Content-Type': 'text/plain' });
      res.end('Unauthorized: ' + text);
    };
    const header = req.headers['service-signature'];
    if (!header) return refuse('Missing Signature');
    const parts = header.split(',');
    if (parts.length !== 2 || !/^t=\d+$/.test(parts[0]) || !parts[1].startsWith('v1=')) {
      return refuse('Invalid Signature Format');
    }
    const t = parts[0].slice(2);
    const v1 = parts[1].slice(3);
    const now = Date.now();
    if (!(Number(t) > now - 300000 && Number(t) <= now + 60000)) return refuse('Invalid Time Value');
    let event;
    try {
      event = JSON.parse(body.toString('utf8'));
    } catch (err) {
      res.writeHead(400, { 'Content-Type': 'text/plain' });
      return res.end('Bad Request: invalid JSON');
    }
    const payload = JSON.stringify(event);
    const expected = crypto.createHmac('sha256', secret).update(t + '.' + payload).digest('hex');
    const got = Buffer.from(v1);
    const want = Buffer.from(expected);
    if (got.length !== want.length || !crypto.timingSafeEqual(got, want)) return refuse('Invalid signature');
    res.writeHead(200, { 'Content-Type': 'application/json' });
    res.end('{"ok":true}');
  });
});

server.listen(0, '127.0.0.1', () => console.log(server.address().port));
