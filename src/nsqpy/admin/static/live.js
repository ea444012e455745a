/*
 * Live numbers and small graphs without graphite (nsqadmin started with --live-interval).
 *
 * Pages mark cells with NSQ.live.cell(...): the cell keeps its number from the page's own API
 * answer and gains a sparkline; every interval the series are fetched from /api/live (filtered to
 * what the page shows) and every marked cell gets the newest value and graph, without a reload.
 * Counters (messages, requeues, timeouts) are shown as rates per second.
 */
(function () {
  'use strict';

  var NSQ = window.NSQ, h = NSQ.h;
  var SVG = 'http://www.w3.org/2000/svg';
  var interval = NSQ.CONFIG.liveInterval || 0;
  var COUNTERS = { message_count: true, requeue_count: true, timeout_count: true };

  function key(topic, channel, node) { return [topic, channel || '', node || '*'].join('\u0000'); }

  // a cell (td) whose number and sparkline follow the series `metric` of (topic, channel, node)
  function cell(text, topic, channel, node, metric, tag) {
    return h(tag || 'td', { 'class': 'num live', 'data-live': key(topic, channel, node), 'data-metric': metric },
      h('span', { 'class': 'spark' }), h('span', { 'class': 'live-num' }, text));
  }

  // a number cell: live when --live-interval is set, a plain cell (as before) otherwise
  function num(text, topic, channel, node, metric) {
    return interval ? cell(text, topic, channel, node, metric) : NSQ.td(text, true);
  }

  // the Rate column's cell (messages per second), only with live data
  function rate(topic, channel, node) {
    return interval ? cell('', topic, channel, node, 'rate') : null;
  }

  // next to graphite's Rate column (both configured) this one says it is the live one
  function rateHeader(headers) {
    var label = NSQ.graphite && NSQ.graphite.active ? '#Live Rate' : '#Rate';
    return interval ? headers.concat([label]) : headers;
  }

  function sparkline(values, rate) {
    var w = 120, hgt = 20, pts = [], max = 0, n = values.length;
    values.forEach(function (v) { if (v !== null && v > max) max = v; });
    values.forEach(function (v, i) {
      if (v === null) return;
      var x = n > 1 ? i * (w - 2) / (n - 1) + 1 : w / 2;
      var y = hgt - 1 - (max ? v / max * (hgt - 3) : 0);
      pts.push(x.toFixed(1) + ',' + y.toFixed(1));
    });
    var svg = document.createElementNS(SVG, 'svg');
    svg.setAttribute('width', w);
    svg.setAttribute('height', hgt);
    svg.setAttribute('viewBox', '0 0 ' + w + ' ' + hgt);
    svg.setAttribute('class', 'sparkline' + (rate ? ' rate' : ''));
    var line = document.createElementNS(SVG, 'polyline');
    line.setAttribute('points', pts.join(' '));
    svg.appendChild(line);
    var title = document.createElementNS(SVG, 'title');
    title.textContent = 'max ' + (rate ? max.toFixed(2) + '/s' : NSQ.fmt(max));
    svg.appendChild(title);
    return svg;
  }

  function lastValue(values) {
    for (var i = values.length - 1; i >= 0; i--) if (values[i] !== null) return values[i];
    return null;
  }

  function fill(series) {
    var byKey = {};
    series.forEach(function (s) { byKey[key(s.topic, s.channel, s.node)] = s; });
    document.querySelectorAll('[data-live]').forEach(function (el) {
      var s = byKey[el.getAttribute('data-live')], metric = el.getAttribute('data-metric');
      if (!s || !Array.isArray(s[metric])) return;
      var rate = /rate$/.test(metric), v = lastValue(s[metric]);
      el.querySelector('.live-num').textContent = v === null ? 'N/A' : rate ? v.toFixed(2) : NSQ.fmt(v);
      // a running total draws no graph: its rate has one
      if (!COUNTERS[metric]) el.querySelector('.spark').replaceChildren(sparkline(s[metric], rate));
    });
  }

  // the narrowest /api/live query that covers every marked cell of the page
  function query() {
    var topics = {}, channels = {}, nodes = {};
    document.querySelectorAll('[data-live]').forEach(function (el) {
      var parts = el.getAttribute('data-live').split('\u0000');
      topics[parts[0]] = true;
      channels[parts[1]] = true;
      nodes[parts[2]] = true;
    });
    // a sparkline is 120 px wide: more points than that would not be seen
    var q = ['points=120'], t = Object.keys(topics), c = Object.keys(channels), n = Object.keys(nodes);
    if (t.length === 1) q.push('topic=' + NSQ.enc(t[0]));
    if (c.length === 1) q.push('channel=' + NSQ.enc(c[0]));
    if (n.length === 1) q.push('node=' + NSQ.enc(n[0]));
    return '?' + q.join('&');
  }

  function refresh() {
    if (!document.querySelector('[data-live]')) return Promise.resolve();
    return NSQ.api('GET', '/live' + query()).then(function (data) { fill(data.series || []); },
      function () { /* the next round tries again */ });
  }

  // start after a page rendered; addTimer hands the interval to the router (cleared on navigation)
  function start(addTimer) {
    if (!interval || !document.querySelector('[data-live]')) return;
    refresh();
    addTimer(setInterval(refresh, Math.max(1000, interval * 1000)));
  }

  NSQ.live = { enabled: interval > 0, interval: interval, cell: cell, num: num, rate: rate,
    rateHeader: rateHeader, start: start, refresh: refresh, sparkline: sparkline };
})();
