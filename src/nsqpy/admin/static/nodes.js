/*
 * The nodes list and one node's page, with upstream's content: the list shows each nsqd's topic
 * count badge and a lookupd-connections button that opens the list of its registrations; the node
 * page shows every topic (with its tombstone button), each channel's Deferred / Requeued /
 * Timed Out, and one row per client connection.
 */
(function () {
  'use strict';

  var NSQ = window.NSQ, CONFIG = NSQ.CONFIG;
  var h = NSQ.h, link = NSQ.link, fmt = NSQ.fmt, enc = NSQ.enc, badge = NSQ.badge, td = NSQ.td;

  function nodeAddress(n) {
    var host = n.broadcast_address.indexOf(':') >= 0 ? '[' + n.broadcast_address + ']' : n.broadcast_address;
    return host + ':' + n.http_port;
  }

  function lookupdConns(n) {
    var conns = n.remote_addresses || [];
    var list = h('div', { 'class': 'popover', hidden: true, role: 'tooltip' },
      conns.map(function (a) { return h('div', null, a); }));
    var consistent = conns.length === CONFIG.nsqlookupd.length;
    var button = h('button', {
      type: 'button', 'class': 'conn-count' + (consistent ? '' : ' inconsistent'),
      title: consistent ? 'registered with every nsqlookupd' : 'not registered with every nsqlookupd',
      'aria-expanded': 'false',
      onclick: function () {
        list.hidden = !list.hidden;
        button.setAttribute('aria-expanded', String(!list.hidden));
      }
    }, String(conns.length));
    return h('td', { 'class': 'conns' }, button, list);
  }

  NSQ.pages.nodes = function () {
    return NSQ.api('GET', '/nodes').then(function (data) {
      var nodes = data.nodes || [];
      var lookupds = CONFIG.nsqlookupd.length;
      var rows = nodes.map(function (n) {
        var addr = nodeAddress(n);
        var topics = n.topics || [];
        return h('tr', { 'data-node': addr, 'class': n.out_of_date ? 'out-of-date' : null },
          td(n.hostname),
          h('td', null, link('/nodes/' + addr, n.broadcast_address)),
          td(n.tcp_port, true), td(n.http_port, true),
          h('td', null, n.version, n.out_of_date ? badge('out of date', 'warn') : null),
          lookupds ? lookupdConns(n) : null,
          h('td', { 'class': 'wrap' }, topics.length ? h('span', { 'class': 'count', title: 'topics' },
            String(topics.length)) : null,
          topics.map(function (t) {
            var a = link('/topics/' + enc(t.topic), t.topic);
            a.className = 'topic-label' + (t.tombstoned ? ' tombstoned' : '');
            if (t.tombstoned) a.title = 'this topic is currently tombstoned on this node';
            return [a, ' '];
          })));
      });
      var headers = ['Hostname', 'Broadcast Address', '#TCP Port', '#HTTP Port', 'Version'];
      if (lookupds) headers.push('Lookupd Conns.');
      headers.push('Topics');
      return [h('h1', null, 'NSQd Nodes (' + nodes.length + ')'), NSQ.warning(data),
        nodes.length ? NSQ.table(headers, rows) : NSQ.alertBox('info', 'No nsqd nodes are registered.')];
    });
  };

  function tombstoneButton(node, topic) {
    if (!CONFIG.isAdmin || !CONFIG.nsqlookupd.length) return null;
    return h('button', {
      'class': 'btn-link tombstone', type: 'button', 'data-tombstone': topic,
      title: 'tombstone this node for the topic',
      onclick: NSQ.runAction('Tombstone ' + node + ' for topic "' + topic + '" (and delete the topic there)?',
        'Node tombstoned for topic "' + topic + '".',
        function () { return NSQ.api('DELETE', '/nodes/' + enc(node), { topic: topic }); })
    }, '✘');
  }

  var live = NSQ.live, gr = NSQ.graphite;
  var CHANNEL_HEAD = live.rateHeader(['', 'Channel', '#Depth', '#Memory + Disk', '#In-Flight', '#Deferred',
    '#Requeued', '#Timed Out', '#Messages', '#Connections']);
  var CLIENT_HEAD = ['', 'Client Host', 'User-Agent', 'Attributes', '#In-Flight', '#Ready Count',
    '#Requeued', '#Finished', '#Messages', '#Connected'];

  function headRow(cells, cls) {
    return h('tr', { 'class': cls }, cells.map(function (c) {
      var num = c.charAt(0) === '#';
      return h('th', num ? { 'class': 'num' } : null, num ? c.slice(1) : c);
    }));
  }

  function channelRows(node, t, c) {
    var clients = c.clients || [];
    var rows = [headRow(CHANNEL_HEAD, 'sub-head'),
      h('tr', { 'class': 'channel', 'data-channel': c.channel_name },
        td(''),
        h('td', null, link('/topics/' + enc(t.topic_name) + '/' + enc(c.channel_name), c.channel_name),
          c.paused ? badge('paused', 'paused') : null),
        live.num(fmt(c.depth), t.topic_name, c.channel_name, node, 'depth'),
        td(fmt(c.memory_depth) + ' + ' + fmt(c.backend_depth), true),
        live.num(fmt(c.in_flight_count), t.topic_name, c.channel_name, node, 'in_flight_count'),
        live.num(fmt(c.deferred_count), t.topic_name, c.channel_name, node, 'deferred_count'),
        td(fmt(c.requeue_count), true), td(fmt(c.timeout_count), true),
        td(fmt(c.message_count), true), td(fmt(clients.length), true),
        live.rate(t.topic_name, c.channel_name, node)),
      gr.row([null, null].concat(['depth', null, 'in_flight_count', 'deferred_count', 'requeue_count',
        'timeout_count', 'message_count', 'clients'].map(function (m) {
        return m && ['channel', node, t.topic_name, c.channel_name, m];
      })))];
    if (!clients.length) {
      rows.push(h('tr', null, h('td', { colspan: 10, 'class': 'notice' }, 'No clients connected to this channel.')));
      return rows;
    }
    rows.push(headRow(CLIENT_HEAD, 'sub-head'));
    clients.forEach(function (cl) {
      rows.push(h('tr', { 'class': 'client', 'data-client': cl.client_id, title: cl.remote_address },
        td(''), td(NSQ.clientName(cl, false)),
        h('td', null, cl.user_agent ? h('small', null, cl.user_agent) : null),
        h('td', null, NSQ.clientAttrs(cl)),
        td(fmt(cl.in_flight_count), true), td(fmt(cl.ready_count), true),
        td(fmt(cl.requeue_count), true), td(fmt(cl.finish_count), true),
        td(fmt(cl.message_count), true), td(NSQ.nanotohuman(cl.connected), true)));
    });
    return rows;
  }

  // upstream's node graphs from nsqd's --statsd-mem-stats keys
  function memGraphs(node) {
    if (!gr.active) return null;
    var graphs = [['*_bytes', 'GC Pressure'], ['gc_pause_*', 'GC Pause Percentiles'], ['gc_runs', 'GC Runs'],
      ['heap_objects', 'Heap Objects In-Use']];
    return h('div', { 'class': 'mem-graphs' }, graphs.map(function (g) {
      return h('figure', null, gr.spark('node', node, '', '', g[0], 200), h('figcaption', null, g[1]));
    }));
  }

  NSQ.pages.node = function (node) {
    return NSQ.api('GET', '/nodes/' + enc(node)).then(function (data) {
      var topics = data.topics || [];
      var body = [];
      topics.forEach(function (t) {
        var channels = t.channels || [];
        body.push(headRow(['Topic', '', '#Depth', '#Memory + Disk', live.enabled ? '#Rate' : '', '', '', '',
          '#Messages', '#Channels'], 'topic-head'));
        body.push(h('tr', { 'class': 'topic', 'data-topic': t.topic_name },
          h('td', { colspan: 2 }, tombstoneButton(node, t.topic_name),
            link('/topics/' + enc(t.topic_name), t.topic_name), t.paused ? badge('paused', 'paused') : null),
          live.num(fmt(t.depth), t.topic_name, '', node, 'depth'),
          td(fmt(t.memory_depth) + ' + ' + fmt(t.backend_depth), true),
          live.rate(t.topic_name, '', node) || td(''), td(''), td(''), td(''),
          td(fmt(t.message_count), true), td(fmt(channels.length), true)));
        body.push(gr.row([null, null, ['topic', node, t.topic_name, '', 'depth'], null, null, null, null, null,
          ['topic', node, t.topic_name, '', 'message_count']]));
        if (!channels.length) {
          body.push(h('tr', null, h('td', { colspan: 10, 'class': 'notice' }, 'No channels exist for this topic.')));
        }
        channels.forEach(function (c) { body.push.apply(body, channelRows(node, t, c)); });
      });
      return [
        NSQ.crumbs(link('/nodes', 'Nodes'), node),
        h('h1', null, h('span', { 'class': 'kind' }, 'Node: '), node), NSQ.warning(data),
        memGraphs(node),
        h('div', { 'class': 'summary' },
          h('div', null, h('strong', null, fmt(topics.length)), 'topics'),
          h('div', null, h('strong', null, fmt(data.total_messages)), 'messages'),
          h('div', null, h('strong', null, fmt(data.total_clients)), 'clients')),
        NSQ.extras.replicationSection(data),
        topics.length ? NSQ.scroller(h('table', { 'class': 'data node-detail' }, h('tbody', null, body)))
          : NSQ.alertBox('warning', 'No topics exist on this node.')
      ];
    });
  };
})();
