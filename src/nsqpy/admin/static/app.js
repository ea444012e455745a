/*
 * nsqadmin UI: a small single-page app over nsqadmin's JSON API (/api/...).
 *
 * Pages (client-side routes under the base path, as upstream):
 *   /                         topics ("streams") with depth, in-flight and message totals
 *   /topics/:topic            per-node producers and channels; empty/delete/pause actions
 *   /topics/:topic/:channel   per-node channel stats and client connections; actions
 *   /nodes, /nodes/:node      nsqd nodes, one node's topics/channels
 *   /lookup                   topics without producers; create topic/channel
 *   /counter                  cluster-wide running message counter (counter.js)
 *
 * All data reaches the DOM through textContent (the helper `h`), never as HTML.
 */
(function () {
  'use strict';

  var NSQ = window.NSQ, CONFIG = NSQ.CONFIG, BASE = NSQ.BASE;
  var h = NSQ.h, append = NSQ.append, url = NSQ.url, link = NSQ.link, fmt = NSQ.fmt, enc = NSQ.enc;
  var badge = NSQ.badge, alertBox = NSQ.alertBox, warning = NSQ.warning, sum = NSQ.sum;
  var table = NSQ.table, td = NSQ.td, crumbs = NSQ.crumbs, api = NSQ.api, mapLimit = NSQ.mapLimit;
  var noProducers = NSQ.noProducers, live = NSQ.live, gr = NSQ.graphite, ex = NSQ.extras;
  var app = document.getElementById('app');
  var flashBox = document.getElementById('flash');
  var pendingFlash = null;
  var renderSeq = 0;
  var timers = [];

  // --- confirm dialog and actions --------------------------------------------------------------

  function confirmDialog(text) {
    var dialog = document.getElementById('confirm-dialog');
    document.getElementById('confirm-text').textContent = text;
    return new Promise(function (resolve) {
      dialog.addEventListener('close', function onClose() {
        dialog.removeEventListener('close', onClose);
        resolve(dialog.returnValue === 'ok');
      });
      dialog.returnValue = '';
      dialog.showModal();
      document.getElementById('confirm-ok').focus();
    });
  }

  function setFlash(kind, text) { pendingFlash = { kind: kind, text: text }; }

  // a flash message now, without re-rendering the page (what the user typed stays)
  function showFlash(kind, text) {
    flashBox.replaceChildren(alertBox(kind, text));
  }

  // ask, run the request, then re-render (or go to `after`) with the outcome as a flash message
  function runAction(question, done, request, after) {
    return function (ev) {
      var button = ev && ev.currentTarget;
      confirmDialog(question).then(function (ok) {
        if (!ok) return;
        if (button) button.disabled = true;
        request().then(function (data) {
          if (data && data.message) setFlash('warning', data.message);
          else setFlash('success', done);
        }, function (err) {
          setFlash('error', (err.status === 403 ? 'Not allowed: ' : 'Failed: ') + err.message);
        }).then(function () {
          if (after) navigate(after); else render();
        });
      });
    };
  }

  function actionButton(label, cls, question, done, request, after) {
    return h('button', {
      'class': 'btn ' + cls, type: 'button', 'data-action': label,
      onclick: runAction(question, done, request, after)
    }, label);
  }

  NSQ.runAction = runAction;
  NSQ.showFlash = showFlash;
  NSQ.actionButton = actionButton;

  // --- pages ---------------------------------------------------------------------------------

  function topicsPage() {
    return api('GET', '/topics').then(function (data) {
      var names = data.topics || [];
      return mapLimit(names, 6, function (name) {
        return api('GET', '/topics/' + enc(name)).catch(function (err) { return { error: err }; });
      }).then(function (stats) {
        var rows = names.map(function (name, i) {
          var t = stats[i];
          if (t.error) {
            var note = noProducers(t.error) ? badge('no producers', 'muted') : badge(t.error.message, 'danger');
            return h('tr', null, h('td', null, link('/topics/' + enc(name), name), note),
              td(''), td(''), td(''), td(''), td(''), td(''), live.enabled ? td('') : null,
              gr.active ? [td(''), td(''), td('')] : null);
          }
          return h('tr', { 'data-topic': name },
            h('td', null, link('/topics/' + enc(name), name), t.paused ? badge('paused', 'paused') : null),
            live.num(fmt(t.depth), name, '', '*', 'depth'),
            td(fmt(sum(t.channels, 'depth')), true),
            live.num(fmt(sum(t.channels, 'in_flight_count')), name, '', '*', 'in_flight_count'),
            live.num(fmt(t.message_count), name, '', '*', 'message_count'),
            td(fmt((t.channels || []).length), true),
            td(fmt((t.nodes || []).length), true),
            live.rate(name, '', '*'),
            gr.active ? h('td', null, gr.spark('topic', '', name, '', 'depth')) : null,
            gr.active ? h('td', null, gr.spark('topic', '', name, '', 'message_count')) : null,
            gr.rate('topic', '*', name, ''));
        });
        return [
          h('h1', null, 'Topics'),
          warning(data),
          names.length ? table(gr.header(live.rateHeader(['Topic', '#Topic Depth', '#Channel Depth', '#In-Flight',
            '#Messages', '#Channels', '#Nodes']).concat(gr.active ? ['Depth', 'Messages'] : [])), rows)
            : alertBox('info', 'No topics yet. Topics appear once a producer publishes to nsqd.')
        ];
      });
    });
  }

  function topicActions(t) {
    if (!CONFIG.isAdmin) return null;
    var name = t.topic_name, path = '/topics/' + enc(name);
    var pause = t.paused
      ? actionButton('UnPause Topic', 'btn-success', 'Are you sure you want to unpause topic "' + name + '"?',
        'Topic unpaused.', function () { return api('POST', path, { action: 'unpause' }); })
      : actionButton('Pause Topic', 'btn-primary', 'Are you sure you want to pause topic "' + name + '"?',
        'Topic paused.', function () { return api('POST', path, { action: 'pause' }); });
    return h('div', { 'class': 'actions' },
      actionButton('Empty Queue', 'btn-warning', 'Are you sure you want to empty topic "' + name + '"?',
        'Topic emptied.', function () { return api('POST', path, { action: 'empty' }); }),
      actionButton('Delete Topic', 'btn-danger', 'Are you sure you want to delete topic "' + name + '"?',
        'Topic "' + name + '" deleted.', function () { return api('DELETE', path); }, '/'),
      pause);
  }

  function topicPage(topic) {
    var head = [crumbs(link('/', 'Streams'), topic),
      h('h1', null, h('span', { 'class': 'kind' }, 'Topic: '), topic)];
    return api('GET', '/topics/' + enc(topic)).then(function (t) {
      if (t.paused) head[1].appendChild(badge('paused', 'paused'));
      var tombstone = CONFIG.isAdmin && CONFIG.nsqlookupd.length;
      var topicKeys = ex.keys([t]), chanKeys = ex.keys(t.channels);
      var nodeRows = (t.nodes || []).map(function (n) {
        return h('tr', { 'data-node': n.node },
          h('td', null,
            tombstone ? h('button', {
              'class': 'btn-link', type: 'button', title: 'tombstone this node for the topic',
              onclick: runAction('Tombstone ' + n.node + ' for topic "' + topic + '" (and delete the topic there)?',
                'Node tombstoned.', function () { return api('DELETE', '/nodes/' + enc(n.node), { topic: topic }); })
            }, '✘') : null,
            NSQ.nodeLabel(n),
            n.paused ? badge('paused', 'paused') : null),
          live.num(fmt(n.depth), topic, '', n.node, 'depth'),
          td(fmt(n.memory_depth) + ' + ' + fmt(n.backend_depth), true),
          live.num(fmt(n.message_count), topic, '', n.node, 'message_count'),
          td(fmt((n.channels || []).length), true), NSQ.e2eCells(n.e2e_processing_latency, t.e2e_processing_latency),
          live.rate(topic, '', n.node), gr.rate('topic', n.node, topic, ''), ex.cells(n, topicKeys));
      }).map(function (tr, i) {
        var node = t.nodes[i].node;
        return [tr, gr.row([null, ['topic', node, topic, '', 'depth'], null, ['topic', node, topic, '', 'message_count'],
          null, gr.e2eSpec(node, t.nodes[i].e2e_processing_latency)])];
      });
      nodeRows.push(h('tr', { 'class': 'total' }, td('Total'), live.num(fmt(t.depth), topic, '', '*', 'depth'),
        td(fmt(t.memory_depth) + ' + ' + fmt(t.backend_depth), true),
        live.num(fmt(t.message_count), topic, '', '*', 'message_count'),
        td(fmt((t.channels || []).length), true), NSQ.e2eCells(t.e2e_processing_latency, t.e2e_processing_latency),
        live.rate(topic, '', '*'), gr.rate('topic', '*', topic, ''), ex.cells(t, topicKeys)),
        gr.row([null, ['topic', '*', topic, '', 'depth'], null, ['topic', '*', topic, '', 'message_count'], null,
          gr.e2eSpec('*', t.e2e_processing_latency)]));
      var channels = t.channels || [];
      var chanRows = channels.map(function (c) {
        return h('tr', { 'data-channel': c.channel_name },
          h('td', null, link('/topics/' + enc(topic) + '/' + enc(c.channel_name), c.channel_name),
            c.paused ? badge('paused', 'paused') : null),
          live.num(fmt(c.depth), topic, c.channel_name, '*', 'depth'),
          td(fmt(c.memory_depth) + ' + ' + fmt(c.backend_depth), true),
          live.num(fmt(c.in_flight_count), topic, c.channel_name, '*', 'in_flight_count'),
          live.num(fmt(c.deferred_count), topic, c.channel_name, '*', 'deferred_count'),
          live.num(fmt(c.requeue_count), topic, c.channel_name, '*', 'requeue_count'),
          live.num(fmt(c.timeout_count), topic, c.channel_name, '*', 'timeout_count'),
          live.num(fmt(c.message_count), topic, c.channel_name, '*', 'message_count'),
          td(fmt(c.client_count), true), NSQ.e2eCells(c.e2e_processing_latency, t.e2e_processing_latency),
          live.rate(topic, c.channel_name, '*'), ex.cells(c, chanKeys));
      }).map(function (tr, i) {
        return [tr, channelGraphs(topic, channels[i].channel_name, '*', channels[i].e2e_processing_latency)];
      });
      return head.concat([
        warning(t),
        topicActions(t),
        h('h2', null, 'Topic Message Queue'),
        table(gr.header(live.rateHeader(['NSQd Host', '#Depth', '#Memory + Disk', '#Messages', '#Channels']
          .concat(NSQ.e2eHeaders(t.e2e_processing_latency)))).concat(ex.headers(topicKeys)), nodeRows,
          { 'data-live-table': 'nodes' }),
        ex.historySection(t),
        h('h2', null, 'Channel Message Queues'),
        channels.length
          ? table(live.rateHeader(['Channel', '#Depth', '#Memory + Disk', '#In-Flight', '#Deferred',
            '#Requeued', '#Timed Out', '#Messages', '#Connections'].concat(NSQ.e2eHeaders(t.e2e_processing_latency)))
            .concat(ex.headers(chanKeys)), chanRows, { 'data-live-table': 'channels' })
          : alertBox('info', 'No channels exist for this topic. Messages will queue at the topic until a channel is created.')
      ]);
    }, function (err) {
      if (!noProducers(err)) throw err;
      return head.concat([alertBox('warning', 'No producers exist for this topic. '),
        h('p', null, 'See ', link('/lookup', 'Lookup'), ' for topics known to nsqlookupd without producers.')]);
    });
  }

  // upstream's graph row under a channel: depth, in-flight, deferred, requeued, timed out, messages, clients
  function channelGraphs(topic, channel, node, e2e) {
    var spec = function (metric) { return ['channel', node, topic, channel, metric]; };
    return gr.row([null, spec('depth'), null, spec('in_flight_count'), spec('deferred_count'),
      spec('requeue_count'), spec('timeout_count'), spec('message_count'), spec('clients'), gr.e2eSpec(node, e2e)]);
  }

  function channelActions(c) {
    if (!CONFIG.isAdmin) return null;
    var topic = c.topic_name, name = c.channel_name;
    var path = '/topics/' + enc(topic) + '/' + enc(name), what = 'channel "' + topic + ':' + name + '"';
    var pause = c.paused
      ? actionButton('UnPause Channel', 'btn-success', 'Are you sure you want to unpause ' + what + '?',
        'Channel unpaused.', function () { return api('POST', path, { action: 'unpause' }); })
      : actionButton('Pause Channel', 'btn-primary', 'Are you sure you want to pause ' + what + '?',
        'Channel paused.', function () { return api('POST', path, { action: 'pause' }); });
    return [h('div', { 'class': 'actions' },
      actionButton('Empty Queue', 'btn-warning', 'Are you sure you want to empty ' + what + '?',
        'Channel emptied.', function () { return api('POST', path, { action: 'empty' }); }),
      actionButton('Delete Channel', 'btn-danger', 'Are you sure you want to delete ' + what + '?',
        'Channel "' + name + '" deleted.', function () { return api('DELETE', path); },
        '/topics/' + enc(topic)),
      pause), c.history_kept ? ex.rewindControl(path, what, topic) : null];  // a row of its own
  }

  // the channel, and whether its topic keeps history (for the rewind action)
  function channelWithHistory(topic, channel) {
    return api('GET', '/topics/' + enc(topic) + '/' + enc(channel)).then(function (c) {
      if (!CONFIG.isAdmin) return c;
      return api('GET', '/topics/' + enc(topic)).then(function (t) {
        c.history_kept = !!(t && t.history);
        return c;
      }, function () { return c; });
    });
  }

  function channelPage(topic, channel) {
    return channelWithHistory(topic, channel).then(function (c) {
      var title = h('h1', null, h('span', { 'class': 'kind' }, 'Channel: '), topic + ' / ' + channel,
        c.paused ? badge('paused', 'paused') : null);
      var where = crumbs(link('/', 'Streams'), link('/topics/' + enc(topic), topic), channel);
      if (!(c.nodes || []).length) {
        // upstream answers {"message": ""} for a channel no nsqd has: its notice, no actions
        return [where, title, warning(c),
          h('div', { 'class': 'alert warning', role: 'alert', id: 'no-producers' },
            h('strong', null, 'Notice'), ' No producers exist for this topic/channel. ',
            'See ', link('/lookup', 'Lookup'), ' for more information.')];
      }
      var keys = ex.keys([c]);
      var rows = (c.nodes || []).map(function (n) {
        return h('tr', { 'data-node': n.node },
          h('td', null, NSQ.nodeLabel(n), n.paused ? badge('paused', 'paused') : null),
          live.num(fmt(n.depth), topic, channel, n.node, 'depth'),
          td(fmt(n.memory_depth) + ' + ' + fmt(n.backend_depth), true),
          live.num(fmt(n.in_flight_count), topic, channel, n.node, 'in_flight_count'),
          live.num(fmt(n.deferred_count), topic, channel, n.node, 'deferred_count'),
          live.num(fmt(n.requeue_count), topic, channel, n.node, 'requeue_count'),
          live.num(fmt(n.timeout_count), topic, channel, n.node, 'timeout_count'),
          live.num(fmt(n.message_count), topic, channel, n.node, 'message_count'),
          td(fmt(n.client_count), true), NSQ.e2eCells(n.e2e_processing_latency, c.e2e_processing_latency),
          live.rate(topic, channel, n.node), gr.rate('channel', n.node, topic, channel), ex.cells(n, keys));
      }).map(function (tr, i) {
        return [tr, channelGraphs(topic, channel, c.nodes[i].node, c.nodes[i].e2e_processing_latency)];
      });
      rows.push(h('tr', { 'class': 'total' }, td('Total'), live.num(fmt(c.depth), topic, channel, '*', 'depth'),
        td(fmt(c.memory_depth) + ' + ' + fmt(c.backend_depth), true),
        live.num(fmt(c.in_flight_count), topic, channel, '*', 'in_flight_count'),
        live.num(fmt(c.deferred_count), topic, channel, '*', 'deferred_count'),
        live.num(fmt(c.requeue_count), topic, channel, '*', 'requeue_count'),
        live.num(fmt(c.timeout_count), topic, channel, '*', 'timeout_count'),
        live.num(fmt(c.message_count), topic, channel, '*', 'message_count'),
        td(fmt(c.client_count), true), NSQ.e2eCells(c.e2e_processing_latency, c.e2e_processing_latency),
        live.rate(topic, channel, '*'), gr.rate('channel', '*', topic, channel), ex.cells(c, keys)),
        channelGraphs(topic, channel, '*', c.e2e_processing_latency));
      var clients = c.clients || [];
      var clientRows = clients.map(function (cl) {
        return h('tr', { 'data-client': cl.client_id, title: cl.remote_address },
          td(NSQ.clientName(cl, true)), h('td', null, cl.user_agent ? h('small', null, cl.user_agent) : null),
          h('td', null, NSQ.clientAttrs(cl)), td(link('/nodes/' + enc(cl.node), cl.node)),
          td(fmt(cl.in_flight_count), true), td(fmt(cl.ready_count), true),
          td(fmt(cl.finish_count), true), td(fmt(cl.requeue_count), true),
          td(fmt(cl.message_count), true), td(NSQ.nanotohuman(cl.connected), true));
      });
      return [
        where, title, warning(c), channelActions(c),
        h('h2', null, 'Channel Message Queue'),
        table(gr.header(live.rateHeader(['NSQd Host', '#Depth', '#Memory + Disk', '#In-Flight', '#Deferred',
          '#Requeued', '#Timed Out', '#Messages', '#Connections'].concat(NSQ.e2eHeaders(c.e2e_processing_latency))))
          .concat(ex.headers(keys)), rows),
        h('h2', null, 'Client Connections'),
        clients.length
          ? table(['Client Host', 'User-Agent', 'Attributes', 'NSQd Host', '#In-Flight', '#Ready Count',
            '#Finished', '#Requeued', '#Messages', '#Connected'], clientRows)
          : alertBox('info', 'No clients are connected to this channel.')
      ];
    });
  }

  function lookupPage() {
    if (!CONFIG.nsqlookupd.length) {
      return Promise.resolve([h('h1', null, 'Lookup'),
        alertBox('info', 'nsqadmin is not configured with --lookupd-http-address.')]);
    }
    return api('GET', '/topics?inactive=true').then(function (data) {
      var inactive = data.topics || {};
      var names = Object.keys(inactive).sort();
      var rows = names.map(function (name) {
        var chans = (inactive[name] || []).map(function (c) {
          return h('span', { 'class': 'chip' }, CONFIG.isAdmin ? h('button', {
            'class': 'btn-link', type: 'button', title: 'delete channel',
            onclick: runAction('Delete channel "' + name + ':' + c + '"?', 'Channel deleted.',
              function () { return api('DELETE', '/topics/' + enc(name) + '/' + enc(c)); })
          }, '✘') : null, c);
        });
        return h('tr', null,
          h('td', null, CONFIG.isAdmin ? h('button', {
            'class': 'btn-link', type: 'button', title: 'delete topic',
            onclick: runAction('Delete topic "' + name + '"?', 'Topic deleted.',
              function () { return api('DELETE', '/topics/' + enc(name)); })
          }, '✘') : null, link('/topics/' + enc(name), name)),
          h('td', { 'class': 'wrap' }, chans));
      });
      var out = [h('h1', null, 'Lookup'),
        h('p', null, 'nsqlookupd: ' + CONFIG.nsqlookupd.join(', ')), warning(data),
        h('h2', null, 'Inactive Topics'),
        names.length ? table(['Topic', 'Channels'], rows)
          : alertBox('info', 'Every topic known to nsqlookupd has producers.')];
      if (CONFIG.isAdmin) {
        var topicInput = h('input', { name: 'topic', required: true, placeholder: 'topic name' });
        var channelInput = h('input', { name: 'channel', placeholder: 'optional' });
        out.push(h('h2', null, 'Create Topic/Channel'),
          h('p', null, 'Creates the topic (and channel) in nsqlookupd so consumers can find it ' +
            'before any producer publishes; the channel is also created on nsqd already producing the topic.'),
          h('form', {
            'class': 'inline', onsubmit: function (ev) {
              ev.preventDefault();
              var body = { topic: topicInput.value.trim(), channel: channelInput.value.trim() };
              api('POST', '/topics', body).then(function (res) {
                setFlash(res.message ? 'warning' : 'success', res.message || 'Created "' + body.topic + '".');
              }, function (err) { setFlash('error', 'Failed: ' + err.message); }).then(render);
            }
          }, h('label', null, 'Topic', topicInput), h('label', null, 'Channel', channelInput),
          h('button', { 'class': 'btn btn-primary', type: 'submit' }, 'Create')));
      }
      return out;
    });
  }

  // --- routing ---------------------------------------------------------------------------------

  var ROUTES = [
    [/^\/(?:topics\/?)?$/, topicsPage, 'topics'],
    [/^\/topics\/([^/]+)$/, topicPage, 'topics'],
    [/^\/topics\/([^/]+)\/([^/]+)$/, channelPage, 'topics'],
    [/^\/nodes\/?$/, NSQ.pages.nodes, 'nodes'],
    [/^\/nodes\/([^/]+)$/, NSQ.pages.node, 'nodes'],
    [/^\/lookup$/, lookupPage, 'lookup'],
    [/^\/counter$/, NSQ.pages.counter, 'counter']
  ];

  function currentPath() {
    var p = location.pathname;
    if (BASE && p.indexOf(BASE) === 0) p = p.slice(BASE.length);
    return p || '/';
  }

  function navigate(path) {
    history.pushState(null, '', url(path));
    render();
  }

  function render() {
    var seq = ++renderSeq;
    timers.forEach(clearInterval);
    timers = [];
    flashBox.replaceChildren(pendingFlash ? alertBox(pendingFlash.kind, pendingFlash.text) : '');
    pendingFlash = null;
    var path = currentPath(), route = null, args = [];
    for (var i = 0; i < ROUTES.length; i++) {
      var m = ROUTES[i][0].exec(path);
      if (m) {
        route = ROUTES[i];
        args = m.slice(1);
        break;
      }
    }
    document.querySelectorAll('.topbar nav.main a').forEach(function (a) {
      a.classList.toggle('active', !!route && a.getAttribute('data-nav') === route[2]);
    });
    if (!route) {
      app.replaceChildren(alertBox('error', 'Page not found: ' + path));
      return;
    }
    args = args.map(decodeURIComponent);
    app.replaceChildren(h('p', { 'class': 'loading' }, 'Loading…'));
    route[1].apply(null, args).then(function (nodes) {
      if (seq !== renderSeq) return;
      app.replaceChildren();
      append(app, nodes);
      live.start(function (id) { timers.push(id); });
      gr.fillRates();
      document.title = 'nsqadmin - ' + (args.join(' / ') || route[2]);
    }, function (err) {
      if (seq !== renderSeq) return;
      app.replaceChildren(alertBox('error', (err && err.message) || String(err)));
    });
  }

  document.addEventListener('click', function (ev) {
    var a = ev.target.closest && ev.target.closest('a[data-link]');
    if (!a || ev.button !== 0 || ev.ctrlKey || ev.metaKey || ev.shiftKey || ev.altKey) return;
    ev.preventDefault();
    navigate(a.getAttribute('data-path'));
  });
  window.addEventListener('popstate', render);

  document.querySelectorAll('a[data-link]').forEach(function (a) {
    a.setAttribute('href', url(a.getAttribute('data-path')));
  });
  document.getElementById('version').textContent = 'v' + CONFIG.version;
  append(document.querySelector('.topbar nav.main'), gr.intervalMenu());
  render();
})();
