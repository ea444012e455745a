/*
 * nsqadmin UI helpers shared by the page scripts: DOM building (data only ever reaches the DOM
 * through text nodes, never as HTML), number formatting as upstream's templates do, and the
 * JSON API client. Everything is exported on window.NSQ.
 */
(function () {
  'use strict';

  var CONFIG = JSON.parse(document.getElementById('nsqadmin-config').textContent);
  var BASE = CONFIG.basePath === '/' ? '' : CONFIG.basePath;

  // --- helpers -------------------------------------------------------------------------------

  function h(tag, attrs) {
    var el = document.createElement(tag);
    if (attrs) {
      Object.keys(attrs).forEach(function (k) {
        var v = attrs[k];
        if (v === null || v === undefined || v === false) return;
        if (k === 'onclick' || k === 'onsubmit') el[k] = v;
        else el.setAttribute(k, v === true ? '' : v);
      });
    }
    for (var i = 2; i < arguments.length; i++) append(el, arguments[i]);
    return el;
  }

  function append(el, child) {
    if (child === null || child === undefined || child === false) return;
    if (Array.isArray(child)) { child.forEach(function (c) { append(el, c); }); return; }
    el.appendChild(child instanceof Node ? child : document.createTextNode(String(child)));
  }

  function url(path) { return BASE + path; }

  function link(path, text) {
    return h('a', { href: url(path), 'data-link': true, 'data-path': path }, text);
  }

  function fmt(n) { return n === null || n === undefined ? '' : Number(n).toLocaleString('en-US'); }

  function enc(s) { return encodeURIComponent(s); }

  function badge(text, kind) { return h('span', { 'class': 'badge ' + (kind || '') }, text); }

  function alertBox(kind, text) { return h('div', { 'class': 'alert ' + kind, role: 'alert' }, text); }

  function warning(data) { return data && data.message ? alertBox('warning', data.message) : null; }

  function sum(list, key) {
    return (list || []).reduce(function (acc, x) { return acc + (x[key] || 0); }, 0);
  }

  function duration(ns) {
    var s = Math.max(0, Math.floor(ns / 1e9));
    var d = Math.floor(s / 86400), hh = Math.floor(s % 86400 / 3600);
    var m = Math.floor(s % 3600 / 60), sec = s % 60;
    if (d) return d + 'd ' + hh + 'h';
    if (hh) return hh + 'h ' + m + 'm';
    if (m) return m + 'm ' + sec + 's';
    return sec + 's';
  }

  // a wide table scrolls inside its box, never the page; `attrs` go on the <table>
  function scroller(tableEl) { return h('div', { 'class': 'table-wrap' }, tableEl); }

  function table(headers, rows, attrs) {
    var a = { 'class': 'data' };
    Object.keys(attrs || {}).forEach(function (k) { a[k] = attrs[k]; });
    return scroller(h('table', a,
      h('thead', null, h('tr', null, headers.map(function (hd) {
        var num = hd.charAt(0) === '#';
        return h('th', num ? { 'class': 'num' } : null, num ? hd.slice(1) : hd);
      }))),
      h('tbody', null, rows)));
  }

  // an nsqd as upstream's topic and channel pages name it: hostname:port, and the address
  // (linked to the node page) when the hostname is not the address; else hostname:port linked
  function nodeLabel(n) {
    var parts = String(n.node).split(':'), port = parts.pop(), address = parts.join(':');
    var hostPort = (n.hostname || '') + ':' + port;
    if ((n.hostname || '').toLowerCase() === address.toLowerCase()) {
      return link('/nodes/' + enc(n.node), hostPort);
    }
    return h('span', { 'class': 'node-label' }, hostPort + ' (', link('/nodes/' + enc(n.node), n.node), ')');
  }

  function td(value, num) { return h('td', num ? { 'class': 'num' } : null, value); }

  function crumbs() {
    var parts = [];
    for (var i = 0; i < arguments.length; i++) {
      if (i) parts.push(h('span', { 'class': 'sep' }, '/'));
      parts.push(arguments[i]);
    }
    return h('div', { 'class': 'breadcrumb' }, parts);
  }

  // --- API -----------------------------------------------------------------------------------

  function ApiError(status, message) { this.status = status; this.message = message; }

  function api(method, path, body) {
    var init = { method: method, headers: { Accept: 'application/json' } };
    if (body !== undefined) {
      init.body = JSON.stringify(body);
      init.headers['Content-Type'] = 'application/json';
    }
    return fetch(url('/api' + path), init).then(function (resp) {
      return resp.text().then(function (text) {
        var data = {};
        try { data = text ? JSON.parse(text) : {}; } catch (e) { data = { message: text }; }
        if (!resp.ok) throw new ApiError(resp.status, data.message || resp.statusText);
        return data;
      });
    });
  }

  // run fn over items with at most `limit` requests in flight
  function mapLimit(items, limit, fn) {
    var results = new Array(items.length), next = 0;
    function worker() {
      if (next >= items.length) return Promise.resolve();
      var i = next++;
      return fn(items[i]).then(function (r) { results[i] = r; return worker(); });
    }
    var workers = [];
    for (var k = 0; k < Math.min(limit, items.length); k++) workers.push(worker());
    return Promise.all(workers).then(function () { return results; });
  }

  function noProducers(err) {
    return err instanceof ApiError && /failed to query any nsqd/i.test(err.message);
  }

  // upstream's `nanotohuman`: 1h2m3.5s, 12.3ms, 40us, 7ns
  function nanotohuman(n) {
    var s = '', v;
    function round(x) { return Math.round(x * 100) / 100; }
    if (n >= 3600e9) { v = Math.floor(n / 3600e9); n = n % 3600e9; s = v + 'h'; }
    if (n >= 60e9) { v = Math.floor(n / 60e9); n = n % 60e9; s += v + 'm'; }
    if (n >= 1e9) return s + round(n / 1e9) + 's';
    if (n >= 1e6) return s + round(n / 1e6) + 'ms';
    if (n >= 1e3) return s + round(n / 1e3) + 'us';
    return s ? s + '0s' : n + 'ns';
  }

  // a client as upstream shows it: host (client id, unless it repeats the hostname)
  function clientName(cl, withPort) {
    var id = (cl.client_id || '').toLowerCase(), host = cl.hostname || '';
    var name = host;
    if (withPort) name += ':' + String(cl.remote_address || '').split(':').pop();
    if (id && id !== host.split('.')[0].toLowerCase() && id !== host.toLowerCase()) {
      name += ' (' + cl.client_id + ')';
    }
    return name;
  }

  // the Attributes cell: sampling, TLS, deflate, snappy, auth, as upstream's labels
  function clientAttrs(cl) {
    var out = [];
    if (cl.sample_rate) out.push(badge('Sampled ' + cl.sample_rate + '%', 'info'));
    if (cl.tls) {
      var tls = h('span', { 'class': 'badge warn', 'data-attr': 'tls' }, 'TLS');
      if (cl.tls_version) {
        tls.title = cl.tls_version + ' ' + cl.tls_cipher_suite + ' ' + cl.tls_negotiated_protocol +
          ' mutual:' + cl.tls_negotiated_protocol_is_mutual;
      }
      out.push(tls);
    }
    if (cl.deflate) out.push(h('span', { 'class': 'badge', 'data-attr': 'deflate' }, 'Deflate'));
    if (cl.snappy) out.push(h('span', { 'class': 'badge primary', 'data-attr': 'snappy' }, 'Snappy'));
    if (cl.authed) {
      out.push(h('span', { 'class': 'badge ok', 'data-attr': 'authed',
        title: 'Authed' + (cl.auth_identity ? ' Identity:' + cl.auth_identity : '') },
        'Authed' + (cl.auth_identity ? ': ' + cl.auth_identity : '')));
    }
    if (cl.topology_zone) out.push(badge('zone ' + cl.topology_zone));
    return out;
  }

  // end-to-end processing latency columns, as upstream's: one per configured percentile, the
  // average over nodes shown, min and max in the title
  function pctLabel(q) {
    var v = Math.floor(q * 100), d = v % 10;
    return v + (d === 1 ? 'st' : d === 2 ? 'nd' : d === 3 ? 'rd' : 'th');
  }

  function e2ePercentiles(e2e) { return (e2e && e2e.percentiles) || []; }

  function e2eHeaders(e2e) {
    return e2ePercentiles(e2e).map(function (p) { return '#E2E ' + pctLabel(p.quantile); });
  }

  // cells for `e2e` in the columns of `columns` (the aggregate's percentiles)
  function e2eCells(e2e, columns) {
    var mine = e2ePercentiles(e2e);
    return e2ePercentiles(columns).map(function (col) {
      var p = mine.filter(function (x) { return x.quantile === col.quantile; })[0];
      if (!p) return td('', true);
      return h('td', { 'class': 'num e2e', title: pctLabel(p.quantile) + ': min = ' + nanotohuman(p.min) +
        ', max = ' + nanotohuman(p.max) }, nanotohuman(p.average));
    });
  }

  window.NSQ = {
    CONFIG: CONFIG, BASE: BASE, h: h, append: append, url: url, link: link, fmt: fmt, enc: enc,
    badge: badge, alertBox: alertBox, warning: warning, sum: sum, duration: duration, table: table,
    scroller: scroller, nodeLabel: nodeLabel,
    td: td, crumbs: crumbs, ApiError: ApiError, api: api, mapLimit: mapLimit, noProducers: noProducers,
    nanotohuman: nanotohuman, clientName: clientName, clientAttrs: clientAttrs, e2eHeaders: e2eHeaders,
    e2eCells: e2eCells, pages: {}
  };
})();
