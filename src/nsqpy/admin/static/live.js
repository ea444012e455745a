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
      h('span', { 'class': 'live-num' }, text), h('span', { 'class': 'spark' }));
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

  var SPARK_W = 72, SPARK_H = 20;
  // the tops a column's scale may take, times a power of ten: round numbers a reader can use
  var STEPS = [1, 2, 2.5, 4, 5, 6, 8, 10];

  // the top of a column's scale: the smallest round number at least 10% above the largest
  // value shown in the column (1 when all are 0); the bottom edge is always 0
  function scaleTop(max) {
    if (!(max > 0)) return 1;
    var target = max * 1.1, exp = Math.pow(10, Math.floor(Math.log10(target)));
    for (var i = 0; i < STEPS.length; i++) {
      var top = Number((STEPS[i] * exp).toPrecision(12));
      if (top >= target) return top;
    }
    return 10 * exp;
  }

  function scaleText(top, rate) {
    var n = top < 1 ? String(top) : NSQ.fmt(top);
    return '0–' + n + (rate ? '/s' : '');
  }

  // values (null = no point) drawn against 0 .. top
  function sparkline(values, rate, top, width, height) {
    var w = width || SPARK_W, hgt = height || SPARK_H, pts = [], n = values.length;
    var min = null, max = null;
    values.forEach(function (v, i) {
      if (v === null) return;
      if (min === null || v < min) min = v;
      if (max === null || v > max) max = v;
      var x = n > 1 ? i * (w - 2) / (n - 1) + 1 : w / 2;
      var y = hgt - 1 - Math.min(v / top, 1) * (hgt - 3);
      pts.push(x.toFixed(1) + ',' + y.toFixed(1));
    });
    var svg = document.createElementNS(SVG, 'svg');
    svg.setAttribute('width', w);
    svg.setAttribute('height', hgt);
    svg.setAttribute('viewBox', '0 0 ' + w + ' ' + hgt);
    svg.setAttribute('class', 'sparkline' + (rate ? ' rate' : ''));
    svg.setAttribute('data-top', String(top));
    var axis = document.createElementNS(SVG, 'line');  // the 0 line
    axis.setAttribute('x1', 0);
    axis.setAttribute('x2', w);
    axis.setAttribute('y1', hgt - 0.5);
    axis.setAttribute('y2', hgt - 0.5);
    axis.setAttribute('class', 'axis');
    svg.appendChild(axis);
    var line = document.createElementNS(SVG, 'polyline');
    line.setAttribute('points', pts.join(' '));
    svg.appendChild(line);
    var title = document.createElementNS(SVG, 'title');
    var show = function (v) { return rate ? v.toFixed(2) + '/s' : NSQ.fmt(v); };
    title.textContent = max === null ? 'no data yet' : 'min ' + show(min) + ', max ' + show(max) +
      ' (scale ' + scaleText(top, rate) + ')';
    svg.appendChild(title);
    return svg;
  }

  function lastValue(values) {
    for (var i = values.length - 1; i >= 0; i--) if (values[i] !== null) return values[i];
    return null;
  }

  // the column a cell starts in, counting the column spans before it
  function columnOf(cell) {
    var col = 0;
    for (var c = cell.previousElementSibling; c; c = c.previousElementSibling) col += c.colSpan || 1;
    return col;
  }

  function cellAt(row, col) {
    for (var c = row.firstElementChild, at = 0; c; c = c.nextElementSibling) {
      at += c.colSpan || 1;
      if (at > col) return c;
    }
    return null;
  }

  // the header cell above a table cell: in the nearest header row before it (the node page has
  // one per topic), else in the table's head
  function headerCell(cell) {
    var col = columnOf(cell);
    for (var row = cell.parentElement.previousElementSibling; row; row = row.previousElementSibling) {
      if (row.querySelector('th')) return cellAt(row, col);
    }
    var head = cell.closest('table').tHead;
    return head && head.rows.length ? cellAt(head.rows[head.rows.length - 1], col) : null;
  }

  var tableIds = 0;

  // sparklines that share a scale: one metric in one column of one table (or a lone graph)
  function columnKey(el) {
    var table = el.closest('table');
    if (!table) return 'own\u0000' + el.getAttribute('data-live') + '\u0000' + el.getAttribute('data-metric');
    if (!table.hasAttribute('data-live-table')) table.setAttribute('data-live-table', 't' + (++tableIds));
    return [table.getAttribute('data-live-table'), el.getAttribute('data-metric'), columnOf(el)].join('\u0000');
  }

  function labelScale(el, metric, text) {
    var holder = el.tagName === 'TD' ? headerCell(el) : el;
    if (!holder) return;
    if (el.tagName === 'TD') holder.setAttribute('data-scale-metric', metric);
    var label = holder.querySelector('.scale');
    if (!label) {
      label = h('span', { 'class': 'scale', title: 'scale of the graphs below: 0 at the bottom edge, ' +
        'this at the top' });
      holder.appendChild(label);
    }
    label.textContent = text;
  }

  function fill(series) {
    var byKey = {}, columns = {};
    series.forEach(function (s) { byKey[key(s.topic, s.channel, s.node)] = s; });
    document.querySelectorAll('[data-live]').forEach(function (el) {
      var s = byKey[el.getAttribute('data-live')], metric = el.getAttribute('data-metric');
      if (!s || !Array.isArray(s[metric])) return;
      var rate = /rate$/.test(metric), v = lastValue(s[metric]);
      el.querySelector('.live-num').textContent = v === null ? 'N/A' : rate ? v.toFixed(2) : NSQ.fmt(v);
      // a running total draws no graph: its rate has one
      if (COUNTERS[metric]) return;
      var col = columnKey(el);
      var group = columns[col] = columns[col] || { max: 0, rate: rate, metric: metric, cells: [] };
      s[metric].forEach(function (x) { if (x !== null && x > group.max) group.max = x; });
      group.cells.push({ el: el, values: s[metric] });
    });
    Object.keys(columns).forEach(function (col) {
      var group = columns[col], top = scaleTop(group.max);
      group.cells.forEach(function (c) {
        var big = c.el.tagName !== 'TD';
        c.el.querySelector('.spark').replaceChildren(
          sparkline(c.values, group.rate, top, big ? 480 : 0, big ? 80 : 0));
        labelScale(c.el, group.metric, scaleText(top, group.rate));
      });
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
    rateHeader: rateHeader, start: start, refresh: refresh, sparkline: sparkline, scaleTop: scaleTop };
})();
