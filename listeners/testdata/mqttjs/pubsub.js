// MQTT.js interop check for the edgegw WebSocket listener, run by
// listeners/mqttjs_test.go: for MQTT 3.1.1 and 5.0 it connects, subscribes,
// publishes one QoS 1 message to itself, prints it and disconnects.
// Usage: node pubsub.js ws://127.0.0.1:PORT/mqtt
'use strict';
const mqtt = require('mqtt');

const url = process.argv[2];
if (!url) {
  console.error('usage: node pubsub.js ws://host:port/path');
  process.exit(2);
}

function roundTrip(protocolVersion) {
  return new Promise((resolve, reject) => {
    const topic = `mqttjs/v${protocolVersion}`;
    const payload = `hello from mqtt.js v${protocolVersion}`;
    const client = mqtt.connect(url, {
      protocolVersion,
      clientId: `mqttjs-${protocolVersion}-${process.pid}`,
      reconnectPeriod: 0,
      connectTimeout: 5000,
    });
    const fail = (err) => { client.end(true); reject(err); };
    client.on('error', fail);
    client.on('connect', () => {
      client.subscribe(topic, { qos: 1 }, (err) => {
        if (err) return fail(err);
        client.publish(topic, payload, { qos: 1 }, (err) => { if (err) fail(err); });
      });
    });
    client.on('message', (t, msg) => {
      console.log(`received ${t} ${msg.toString()}`);
      client.end(false, {}, () => resolve());
    });
  });
}

(async () => {
  const timer = setTimeout(() => { console.error('timeout'); process.exit(1); }, 20000);
  try {
    await roundTrip(4);
    await roundTrip(5);
  } catch (err) {
    console.error(`error: ${err && err.message}`);
    process.exit(1);
  }
  clearTimeout(timer);
  process.exit(0);
})();
