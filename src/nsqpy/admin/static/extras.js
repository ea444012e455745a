/*
 * Columns and sections for nsqpy's opt-in nsqd features, shown only when the API reports them
 * (docs/operations.md, docs/replication.md): with no feature in use the pages are upstream's.
 *
 *   lifecycle counters  dead_letter_count / expired_count / dropped_count: extra columns on the
 *                       topic and channel pages when any node reports the key
 *   leases              lease_count / lease_held_count / lease_oldest_ms (nsqd --leases), likewise
 *   replication         the node page's "Replication" section from nsqd's `replication` (origin
 *                       side) and `replicas` (peer side) keys
 *   history             the topic page's "History" section from a topic's `history` key (nsqd
 *                       --retention, docs/history.md), and a rewind action on its channels' pages
 */
(function () {
  'use strict';

  var NSQ = window.NSQ;
  var h = NSQ.h, td = NSQ.td, fmt = NSQ.fmt, badge = NSQ.badge;
  var LIFECYCLE = [['dead_letter_count', '#Dead Lettered'], ['expired_count', '#Expired'],
    ['dropped_count', '#Dropped'], ['lease_count', '#Leases'], ['lease_held_count', '#Leased'],
    ['lease_oldest_ms', 'Oldest Lease (ms)']];

  // the lifecycle keys reported by any of `objs`, in a fixed order
  function keys(objs) {
    return LIFECYCLE.filter(function (k) {
      return (objs || []).some(function (o) { return o && k[0] in o; });
    }).map(function (k) { return k[0]; });
  }

  function headers(ks) {
    return LIFECYCLE.filter(function (k) { return ks.indexOf(k[0]) >= 0; })
      .map(function (k) { return k[1]; });
  }

  // one cell per key; empty where this node does not report it
  function cells(obj, ks) {
    return ks.map(function (k) {
      return h('td', { 'class': 'num', 'data-key': k }, k in obj ? fmt(obj[k]) : '');
    });
  }

  function replicationSection(data) {
    var origin = data.replication, replicas = data.replicas;
    if (!origin && !replicas) return null;
    var parts = [h('h2', null, 'Replication')];
    if (origin) {
      var up = origin.state === 'up';
      var head = ['Role', 'Peer', 'State', '#Shipped Messages', '#Unacked Batches', '#Unacked Bytes',
        'Without a Copy', '#Waiting Publishes', 'Longest Wait (ms)', '#Failed for No Copy'];
      // the publishers' wait (issue #25); blank for a node that does not report it
      var opt = function (k) { return td(k in origin ? fmt(origin[k]) : '', true); };
      parts.push(NSQ.table(head,
        [h('tr', { 'data-replication': 'origin' }, td('origin (--replicate-to)'), td(origin.peer),
          h('td', null, badge(up ? 'linked' : origin.state, up ? 'ok' : 'danger')),
          td(fmt(origin.shipped_messages), true), td(fmt(origin.unacked_batches), true),
          td(fmt(origin.unacked_bytes), true), td(origin.degraded_setting || ''),
          opt('waiting_publishes'), opt('longest_wait_ms'), opt('failed_publishes'))]));
    }
    if (replicas) {
      parts.push(replicas.length
        ? NSQ.table(['Replica of Origin', 'Link', '#Messages', '#Bytes', '#Disk Bytes'],
          replicas.map(function (r) {
            return h('tr', { 'data-replica': r.origin }, td(r.origin),
              h('td', null, badge(r.link, r.link === 'up' ? 'ok' : 'danger')),
              td(fmt(r.messages), true), td(fmt(r.bytes), true), td(fmt(r.disk_bytes), true));
          }))
        : NSQ.alertBox('info', 'Accepting replicas; no origin replicates to this node yet.'));
    }
    return h('section', { 'class': 'replication', id: 'replication' }, parts);
  }

  function when(ns) {
    return ns ? new Date(Math.floor(ns / 1e6)).toISOString() : '-';
  }

  // per node and in total: retained messages, bytes, segments, oldest message
  function historySection(t) {
    if (!t.history) return null;
    var row = function (label, hist, attrs) {
      return h('tr', attrs, td(label), td(fmt(hist.messages), true), td(fmt(hist.bytes), true),
        td(fmt(hist.segments), true), td(when(hist.oldest_timestamp)));
    };
    var rows = (t.nodes || []).filter(function (n) { return n.history; }).map(function (n) {
      return row(n.node, n.history, { 'data-history-node': n.node });
    });
    rows.push(row('Total', t.history, { 'class': 'total', 'data-history-node': '*' }));
    return h('section', { 'class': 'history', id: 'history' }, h('h2', null, 'History'),
      NSQ.table(['NSQd Host', '#Retained Messages', '#Retained Bytes', '#Segments', 'Oldest Message'], rows));
  }

  // a channel of a topic that keeps history: point it back at a time (POST .../rewind). A
  // rewind replays what the topic retained to every subscriber, so before the confirmation the
  // page asks nsqadmin how much that is (GET /api/history/<topic>?from=) and says it
  function rewindControl(path, what, topic) {
    var input = h('input', { type: 'text', id: 'rewind-to', name: 'to', value: 'earliest', size: 28,
      'aria-describedby': 'rewind-help', autocomplete: 'off', spellcheck: 'false' });
    var button = h('button', { 'class': 'btn btn-warning', type: 'submit', 'data-action': 'Rewind Channel' },
      'Rewind Channel');
    function ask(ev) {
      ev.preventDefault();
      var to = input.value.trim();
      NSQ.api('GET', '/history/' + NSQ.enc(topic) + '?from=' + encodeURIComponent(to)).then(function (p) {
        NSQ.runAction(rewindQuestion(what, to, p), 'Channel rewound.',
          function () { return NSQ.api('POST', path, { action: 'rewind', to: to }); })({ currentTarget: button });
      }, function (err) {
        NSQ.showFlash('error', 'Cannot rewind to "' + to + '": ' + err.message);
      });
    }
    return h('form', { 'class': 'inline rewind', id: 'rewind', onsubmit: ask },
      h('label', { 'for': 'rewind-to' }, 'Rewind to', input), button,
      h('span', { id: 'rewind-help', 'class': 'help' },
        'earliest, an RFC 3339 time (2026-11-28T03:00:00Z) or unix milliseconds'));
  }

  function rewindQuestion(what, to, p) {
    var count = p.messages ? (p.exact ? '' : 'up to ') + fmt(p.messages) + ' retained message' +
      (p.messages === 1 ? '' : 's') : '';
    var text = 'Rewind ' + what + ' to ' + to + '? ' + (count
      ? 'It replays ' + count + ', from ' + p.from + ' on (' + p.nodes + ' nsqd), to every subscriber of the channel.'
      : 'No message is retained from that point on: nothing is replayed.') +
      ' What the channel has queued is dropped.';
    return p.message ? text + '\n\n' + p.message : text;
  }

  NSQ.extras = { keys: keys, headers: headers, cells: cells, replicationSection: replicationSection,
    historySection: historySection, rewindControl: rewindControl };
})();
