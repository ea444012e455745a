/*
 * Upstream's graphite graphs (nsqadmin started with --graphite-url): sparklines and large graphs
 * are graphite /render images, rates come from nsqadmin's /api/graphite. The graphite keys are the
 * ones nsqd's statsd client sends, shaped by --statsd-prefix, --statsd-counter-format and
 * --statsd-gauge-format exactly as upstream's pages build them, so the same graphite serves both.
 * With --proxy-graphite the images are fetched through nsqadmin's own /render.
 */
(function () {
  'use strict';

  var NSQ = window.NSQ, C = NSQ.CONFIG, h = NSQ.h;
  var INTERVALS = ['1h', '2h', '12h', '24h', '48h', '168h', 'off'];

  var METRIC_TYPES = {
    depth: 'gauge', in_flight_count: 'gauge', deferred_count: 'gauge', requeue_count: 'counter',
    timeout_count: 'counter', message_count: 'counter', clients: 'gauge', '*_bytes': 'gauge',
    'gc_pause_*': 'gauge', gc_runs: 'counter', heap_objects: 'gauge', e2e_processing_latency: 'gauge'
  };

  function graphInterval() {
    if (!C.graphEnabled) return 'off';
    var fromQuery = new URLSearchParams(location.search).get('t');
    return fromQuery || localStorage.getItem('graph_interval') || '2h';
  }

  function formatKey(key, metric) {
    var type = METRIC_TYPES[metric];
    var fmt = type === 'counter' ? C.statsdCounterFormat : type === 'gauge' ? C.statsdGaugeFormat : null;
    return fmt === null ? key : fmt.replace(/%s/g, key);
  }

  // nsqd's statsd prefix for a node ("*" for every node), always ending in "."
  function prefix(node) {
    var p = C.statsdPrefix.replace(/%s/g, node.replace(/[.:]/g, '_'));
    return p.substring(1) === '.' ? p : p + '.';
  }

  // what bitly/statsdaemon (and so graphite) makes of a topic or channel name
  function sanitize(s) {
    return s.split(' ').join('_').split('/').join('-').replace(/[^a-zA-Z0-9\-_.]/g, '');
  }

  function targets(typ, node, topic, channel, metric) {
    var p = prefix(node || '*');
    if (typ === 'topic') {
      return ['sumSeries(' + formatKey(p + 'topic.' + sanitize(topic) + '.' + metric, metric) + ')'];
    }
    if (typ === 'channel') {
      return ['sumSeries(' + formatKey(p + 'topic.' + sanitize(topic) + '.channel.' + sanitize(channel) +
        '.' + metric, metric) + ')'];
    }
    if (typ === 'node') {
      var t = p + 'mem.' + metric;
      if (metric === 'gc_runs') t = 'movingAverage(' + t + ',45)';
      return [formatKey(t, metric)];
    }
    if (typ === 'e2e') {  // `topic` is the e2e_processing_latency document here
      var e2e = topic;
      return (e2e.percentiles || []).map(function (pc) {
        var t = p + 'topic.' + e2e.topic + (e2e.channel ? '.channel.' + e2e.channel : '') + '.' + metric +
          '_' + (pc.quantile * 100);
        if (node === '*') t = 'averageSeries(' + t + ')';
        return 'scale(' + formatKey(t, metric) + ',0.000001)';
      });
    }
    // counter: every channel of every topic on every node
    return ['sumSeries(' + formatKey(p + 'topic.*.channel.*.' + metric, metric) + ')'];
  }

  function colors(typ, metric) {
    if ((typ === 'topic' || typ === 'channel') && (metric === 'depth' || metric === 'deferred_count')) return 'red';
    if (typ === 'node') return 'red,green,blue,purple';
    if (typ === 'counter') return 'green';
    return 'blue';
  }

  function renderUrl(params, typ, node, topic, channel, metric, large) {
    var q = new URLSearchParams(params);
    q.set('colorList', colors(typ, metric));
    q.set('bgcolor', 'ff000000');
    q.set('yMin', '0');
    q.set('lineMode', 'connected');
    q.set('drawNullAsZero', 'false');
    q.set('from', '-' + graphInterval());
    q.set('until', '-1min');
    var step = C.statsdInterval + 'sec';
    targets(typ, node, topic, channel, metric).forEach(function (t) {
      // a large graph shows counters per second
      if (large && METRIC_TYPES[metric] === 'counter') t = 'scale(' + t + ',' + (1 / C.statsdInterval) + ')';
      q.append('target', 'summarize(' + t + ',"' + step + '","avg")');
    });
    return (C.proxyGraphite ? NSQ.url('') : C.graphiteUrl) + '/render?' + q.toString();
  }

  function sparklineUrl(typ, node, topic, channel, metric) {
    return renderUrl({ height: '20', width: '120', hideGrid: 'true', hideLegend: 'true', hideAxes: 'true',
      fgcolor: 'black', margin: '0' }, typ, node, topic, channel, metric, false);
  }

  function largeUrl(typ, node, topic, channel, metric) {
    return renderUrl({ height: '450', width: '800', fgcolor: '999999' }, typ, node, topic, channel, metric, true);
  }

  // a sparkline image linking to the large graph
  function spark(typ, node, topic, channel, metric, width) {
    return h('a', { href: largeUrl(typ, node, topic, channel, metric), 'class': 'graphite-link' },
      h('img', { 'class': 'graphite', width: width || 120, height: width ? null : 20, alt: metric,
        src: width ? largeUrl(typ, node, topic, channel, metric) : sparklineUrl(typ, node, topic, channel, metric) }));
  }

  var active = !!C.graphEnabled && graphInterval() !== 'off';

  // the Rate column: messages per second over the last statsd interval, via /api/graphite
  function rate(typ, node, topic, channel) {
    if (!active) return null;
    return h('td', { 'class': 'num graphite-rate', 'data-graphite-target': targets(typ, node, topic, channel,
      'message_count')[0] }, '');
  }

  function header(headers) { return active ? headers.concat(['#Rate']) : headers; }

  // a row of sparklines under a table row; specs: null or [typ, node, topic, channel, metric]
  function row(specs) {
    if (!active) return null;
    return h('tr', { 'class': 'graph-row' }, specs.map(function (s) {
      return h('td', null, s ? spark.apply(null, s) : null);
    }));
  }

  function fillRates() {
    document.querySelectorAll('td[data-graphite-target]').forEach(function (el) {
      NSQ.api('GET', '/graphite?metric=rate&target=' + NSQ.enc(el.getAttribute('data-graphite-target')))
        .then(function (data) { el.textContent = data.rate; }, function () { el.textContent = 'ERROR'; });
    });
  }

  // the header's timeframe menu, as upstream's
  function intervalMenu() {
    if (!C.graphEnabled) return null;
    var current = graphInterval();
    var select = h('select', { id: 'graph-interval', title: 'Graph Timeframe', 'aria-label': 'Graph Timeframe' },
      INTERVALS.map(function (i) { return h('option', { value: i, selected: i === current }, i); }));
    select.onchange = function () {
      localStorage.setItem('graph_interval', select.value);
      location.reload();
    };
    return select;
  }

  // the graph row's e2e cell (appended after the other columns) when percentiles are configured
  function e2eSpec(node, e2e) {
    return e2e && e2e.percentiles && e2e.percentiles.length ? ['e2e', node, e2e, '', 'e2e_processing_latency'] : null;
  }

  NSQ.graphite = { enabled: !!C.graphEnabled, active: active, spark: spark, rate: rate, header: header,
    row: row, e2eSpec: e2eSpec, fillRates: fillRates, targets: targets, largeUrl: largeUrl, intervalMenu: intervalMenu };
})();
