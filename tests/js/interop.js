'use strict'
/*
 * Run one nsqjs 0.13.0 scenario against an nsqd and print its observations as one JSON line.
 *
 * Usage: node interop.js <scenario> <nsqd tcp address> <topic> [CA certificate file]
 *
 * The tls* scenarios upgrade every connection to TLS (verified against the CA file given).
 *
 * tests/interop/test_nsqjs.py runs this and asserts on the JSON. The script only observes
 * (bodies, attempts, ids, times, IDENTIFY responses, heartbeat NOPs, errors); it judges nothing.
 * nsqjs has no heartbeat event, so heartbeats are observed as the NOPs nsqjs writes in reply
 * (NSQDConnection.prototype.write is wrapped; nsqjs sends NOP only to answer `_heartbeat_`).
 */

const crypto = require('crypto')
const fs = require('fs')
const {performance} = require('perf_hooks')
const nsq = require('nsqjs')
const {NSQDConnection} = require('nsqjs/lib/nsqdconnection')

const DEADLINE_MS = 40000
const now = () => performance.now() / 1000
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))
const hex = (b) => Buffer.from(b).toString('hex')

// --- observation hooks on every nsqjs connection (readers and writers) ------------------------
const conns = []
const origConnect = NSQDConnection.prototype.connect
NSQDConnection.prototype.connect = function (...args) {
  this._nops = []
  conns.push(this)
  return origConnect.apply(this, args)
}
const origWrite = NSQDConnection.prototype.write
NSQDConnection.prototype.write = function (data) {
  if (Buffer.from(data).toString() === 'NOP\n') this._nops.push(now())
  return origWrite.call(this, data)
}

function describeConn(conn) {
  const sm = conn.statemachine || {}
  return {
    kind: conn.topic ? 'reader' : 'writer',
    identify: sm.identifyResponse || null,
    state: sm.current_state_name || null,
    inflater: conn.inflater ? conn.inflater.constructor.name : null,
    tls: Boolean(conn.conn && conn.conn.encrypted),
    tls_protocol: conn.conn && conn.conn.getProtocol ? conn.conn.getProtocol() : null,
    nops: conn._nops,
  }
}

async function waitUntil(pred, timeoutMs, what) {
  const deadline = Date.now() + timeoutMs
  while (!pred()) {
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs}ms waiting for ${what}`)
    await sleep(20)
  }
}

function once(emitter, event, timeoutMs, what) {
  return new Promise((resolve, reject) => {
    const t = setTimeout(() => reject(new Error(`timed out waiting for ${what}`)), timeoutMs)
    emitter.once(event, (...args) => {
      clearTimeout(t)
      resolve(args)
    })
  })
}

// --- clients ------------------------------------------------------------------------------------
function splitAddr(address) {
  const i = address.lastIndexOf(':')
  return [address.slice(0, i), Number(address.slice(i + 1))]
}

class Observer {
  constructor() {
    this.deliveries = []
    this.errors = []
    this.closed = 0
  }

  record(msg) {
    const d = {body: hex(msg.body), attempts: msg.attempts, id: msg.id, t: now()}
    this.deliveries.push(d)
    return d
  }
}

async function startReader(address, topic, handler, obs, options = {}) {
  const reader = new nsq.Reader(topic, 'ch', {nsqdTCPAddresses: [address], ...options})
  reader.on('message', (msg) => handler(msg))
  reader.on('error', (err) => obs.errors.push(`reader: ${err}`))
  reader.on('nsqd_closed', () => obs.closed++)
  const ready = once(reader, 'ready', 5000, 'the nsqjs Reader to subscribe')
  reader.connect()
  await ready
  return reader
}

async function startWriter(address, obs, options = {}) {
  const [host, port] = splitAddr(address)
  const writer = new nsq.Writer(host, port, options)
  writer.on('error', (err) => obs.errors.push(`writer: ${err}`))
  writer.on('closed', () => obs.closed++)
  const ready = once(writer, 'ready', 5000, 'the nsqjs Writer to connect')
  writer.connect()
  await ready
  return writer
}

function publish(writer, topic, msgs) {
  return new Promise((resolve) => writer.publish(topic, msgs, (err) => resolve(err ? String(err) : 'OK')))
}

function deferPublish(writer, topic, msg, ms) {
  // nsqjs 0.13.0: deferPublish(topic, 'string', ms) throws "Expect an array of messages to
  // produceMessages" (and leaves a stale callback queued); a one-element array is what works.
  return new Promise((resolve) =>
    writer.deferPublish(topic, [msg], ms, (err) => resolve(err ? String(err) : 'OK'))
  )
}

// --- scenarios ------------------------------------------------------------------------------------
const scenarios = {
  async pubsub(address, topic, out, obs) {
    const reader = await startReader(address, topic, (msg) => {
      obs.record(msg)
      msg.finish()
    }, obs, {maxInFlight: 10})
    const writer = await startWriter(address, obs)
    out.clients = [reader, writer]
    out.responses = []
    out.responses.push(await publish(writer, topic, 'probe'))
    await waitUntil(() => obs.deliveries.length === 1, 5000, 'the probe')
    const binary = Buffer.from([0, 1, 2, 10, 13, 255, 254])
    const big = crypto.randomBytes(100000)
    out.responses.push(await publish(writer, topic, 'single'))
    out.responses.push(await publish(writer, topic, ['m1', binary, big])) // MPUB
    out.responses.push(await publish(writer, topic, {json: [1, 2]})) // serialized by nsqjs
    out.dpub_at = now()
    out.responses.push(await deferPublish(writer, topic, 'deferred', 1200))
    await waitUntil(() => obs.deliveries.length >= 7, 8000, 'all messages')
    await sleep(500)
    out.expected = ['probe', 'single', 'm1', binary, big, '{"json":[1,2]}', 'deferred'].map(hex)
  },

  async requeue(address, topic, out, obs) {
    const reader = await startReader(address, topic, (msg) => {
      obs.record(msg)
      if (msg.attempts > 1) return msg.finish()
      const body = msg.body.toString()
      if (body === 'explicit') msg.requeue(1000, false)
      else if (body === 'default') msg.requeue() // requeueDelay (500ms), with backoff
      else if (body === 'zero') msg.requeue(0, false)
    }, obs, {maxInFlight: 3, requeueDelay: 500, maxBackoffDuration: 0.5})
    const writer = await startWriter(address, obs)
    out.clients = [reader, writer]
    out.responses = [await publish(writer, topic, ['explicit', 'default', 'zero'])]
    await waitUntil(() => obs.deliveries.length >= 6, 10000, '3 messages delivered twice')
    await sleep(800)
  },

  async touch(address, topic, out, obs, options = {}) {
    out.touches = 0
    const keepAlive = async (msg, started) => {
      while (now() - started < 3.0) {
        await sleep(300)
        msg.touch()
        out.touches++
      }
      msg.finish()
    }
    const reader = await startReader(address, topic, (msg) => {
      obs.record(msg)
      if (msg.body.toString() === 'touched') keepAlive(msg, now())
      else if (msg.attempts > 1) msg.finish()
      // first delivery of "untouched": never answered, nsqd must time it out
    }, obs, {maxInFlight: 2, ...options})
    const writer = await startWriter(address, obs)
    out.clients = [reader, writer]
    out.responses = [await publish(writer, topic, ['touched', 'untouched'])]
    await waitUntil(() => obs.deliveries.length >= 3, 6000, "the untouched message's redelivery")
    await sleep(3000 + 1600) // touched is finished at ~3s; then another msg timeout passes
  },

  async touch_identify(address, topic, out, obs) {
    // msg timeout asked for in IDENTIFY (msg_timeout: 1000) instead of nsqd's --msg-timeout
    await scenarios.touch(address, topic, out, obs, {messageTimeout: 1000})
  },

  async heartbeat(address, topic, out, obs) {
    const reader = await startReader(address, topic, (msg) => {
      obs.record(msg)
      msg.finish()
    }, obs, {heartbeatInterval: 1})
    const writer = await startWriter(address, obs, {heartbeatInterval: 1})
    out.clients = [reader, writer]
    out.responses = [await publish(writer, topic, 'before')]
    await waitUntil(() => obs.deliveries.length === 1, 5000, 'the first message')
    out.idle_from = now()
    await sleep(4500)
    out.idle_to = now()
    out.responses.push(await publish(writer, topic, 'after'))
    await waitUntil(() => obs.deliveries.length === 2, 5000, 'the message after the idle period')
  },

  async snappy(address, topic, out, obs) {
    await compression(address, topic, out, obs, {snappy: true})
  },

  async deflate(address, topic, out, obs) {
    // deflateLevel 9 is above nsqd's --max-deflate-level (6): nsqd must answer 6
    await compression(address, topic, out, obs, {deflate: true, deflateLevel: 9})
  },

  async tls(address, topic, out, obs) {
    await compression(address, topic, out, obs, tlsOptions())
  },

  async tls_snappy(address, topic, out, obs) {
    await compression(address, topic, out, obs, {...tlsOptions(), snappy: true})
  },

  async tls_deflate(address, topic, out, obs) {
    await compression(address, topic, out, obs, {...tlsOptions(), deflate: true, deflateLevel: 9})
  },
}

let caFile = null

function tlsOptions() {
  if (!caFile) throw new Error('the tls scenarios need a CA certificate file argument')
  return {tls: true, tlsVerification: true, ca: fs.readFileSync(caFile)}
}

async function compression(address, topic, out, obs, options) {
  const opts = {heartbeatInterval: 1, ...options}
  const rnd = crypto.randomBytes(120000)
  const bodies = []
  for (let i = 0; i < 100; i++) bodies.push(Buffer.from(`small-${i}`))
  bodies.push(Buffer.from('abc'.repeat(40000)), rnd, Buffer.alloc(500))
  const reader = await startReader(address, topic, (msg) => {
    obs.record(msg)
    if (msg.body.toString() === 'small-3' && msg.attempts === 1) msg.requeue(0, false)
    else msg.finish()
  }, obs, {maxInFlight: 25, ...opts})
  const writer = await startWriter(address, obs, opts)
  out.clients = [reader, writer]
  out.responses = [await publish(writer, topic, bodies.slice(0, 60))]
  for (const b of bodies.slice(60)) out.responses.push(await publish(writer, topic, b))
  out.responses.push(await deferPublish(writer, topic, 'deferred', 300))
  await waitUntil(() => obs.deliveries.length >= bodies.length + 2, 15000, 'all messages')
  await sleep(2500) // > --msg-timeout: a FIN nsqd could not decode would cause a redelivery
  out.expected = bodies.concat([Buffer.from('small-3'), Buffer.from('deferred')]).map(hex)
}

// --- main -----------------------------------------------------------------------------------------
function finish(out, obs) {
  const clients = out.clients || []
  delete out.clients
  out.deliveries = obs.deliveries
  out.errors = obs.errors
  out.closed_events = obs.closed
  out.conns = conns.map(describeConn)
  for (const c of clients) {
    try {
      c.close()
    } catch (e) {
      // closing is best effort; the result is already collected
    }
  }
  process.stdout.write(JSON.stringify(out) + '\n', () => process.exit(0))
}

async function main() {
  const [scenario, address, topic, ca] = process.argv.slice(2)
  caFile = ca || null
  const out = {ok: false, scenario}
  const obs = new Observer()
  const deadline = setTimeout(() => {
    out.error = `scenario exceeded ${DEADLINE_MS}ms`
    finish(out, obs)
  }, DEADLINE_MS)
  try {
    if (!scenarios[scenario]) throw new Error(`unknown scenario ${scenario}`)
    await scenarios[scenario](address, topic, out, obs)
    out.ok = true
  } catch (err) {
    out.error = String((err && err.stack) || err)
  }
  clearTimeout(deadline)
  finish(out, obs)
}

main()
