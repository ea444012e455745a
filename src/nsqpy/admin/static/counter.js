/*
 * The counter page: upstream's running counter of messages processed (the sum of every
 * channel's message count over every nsqd), in split-flap digits that count up smoothly between
 * polls instead of jumping, the message rate under it, and the large graphite graph or the live
 * graph when those are configured.
 *
 * Polling as upstream's: the first answer seeds the display, then /api/counter is asked again
 * after 0.1 s, 1.1 s, 2.1 s ... up to every 10 s; each increase is spread over the time until
 * the next answer at the rate it came in, so the digits keep running. The page stops polling
 * and animating once it is left (its elements are no longer in the document).
 */
(function () {
  'use strict';

  var NSQ = window.NSQ, h = NSQ.h, gr = NSQ.graphite, live = NSQ.live;
  var FIRST_POLL_MS = 100, POLL_STEP_MS = 1000, MAX_POLL_MS = 10000, FRAME_MS = 1000 / 60;

  // one split-flap digit: the top half and the bottom half of the same character
  function digit() {
    return h('span', { 'class': 'number' }, h('span', { 'class': 'top' }), h('span', { 'class': 'bottom' }));
  }

  function Counter(numbers, rateLine, warningBox) {
    this.numbers = numbers;
    this.rateLine = rateLine;
    this.warningBox = warningBox;
    this.shown = -1;  // the number on display (fractional while running)
    this.target = 0;  // the last total nsqadmin answered
    this.step = 0;  // added to the display each frame
    this.pollMs = FIRST_POLL_MS;
    this.last = null;  // {t, total} of the previous answer, for the rate
    this.animating = false;
  }

  Counter.prototype.alive = function () { return document.body.contains(this.numbers); };

  Counter.prototype.write = function (value) {
    var text = String(Math.floor(value));
    var digits = this.numbers.querySelectorAll('.number');
    for (var i = digits.length; i < text.length; i++) this.numbers.appendChild(digit());
    digits = this.numbers.querySelectorAll('.number');
    digits.forEach(function (d, i) {
      var ch = i < text.length ? text.charAt(i) : '';
      d.hidden = i >= text.length;
      // a gap before every group of three digits from the right, as thousands are read
      d.classList.toggle('group', i > 0 && (text.length - i) % 3 === 0);
      if (d.firstChild.textContent !== ch) {
        d.firstChild.textContent = ch;
        d.lastChild.textContent = ch;
      }
    });
    this.numbers.setAttribute('data-value', text);
    this.numbers.setAttribute('aria-label', NSQ.fmt(Math.floor(value)) + ' messages processed');
  };

  Counter.prototype.frame = function () {
    if (!this.alive()) return;
    this.shown = Math.min(this.shown + this.step, this.target);
    this.write(this.shown);
    if (this.shown < this.target) setTimeout(this.frame.bind(this), FRAME_MS);
    else this.animating = false;
  };

  Counter.prototype.answer = function (data) {
    var total = 0;
    Object.keys(data.stats || {}).forEach(function (k) { total += data.stats[k].message_count; });
    var now = Date.now();
    if (this.last && now > this.last.t) {
      var perSec = (total - this.last.total) * 1000 / (now - this.last.t);
      this.rateLine.textContent = perSec >= 0 ? NSQ.fmt(Math.round(perSec)) + ' msgs/sec' : '';
    }
    this.last = { t: now, total: total };
    if (this.shown < 0 || total < this.target) {
      // the first answer, or fewer than before (a channel or an nsqd went away): show it as is
      this.shown = this.target = total;
      this.write(total);
    } else if (total > this.target) {
      // spread the increase over the time until the next answer, 60 frames a second
      this.step = (total - this.target) / (this.pollMs / FRAME_MS) * 1.2;
      this.target = total;
      if (!this.animating) {
        this.animating = true;
        this.frame();
      }
    }
    this.warningBox.replaceChildren(NSQ.warning(data) || '');
  };

  Counter.prototype.poll = function () {
    var self = this;
    if (!self.alive()) return Promise.resolve();
    if (gr.active) {
      var big = document.getElementById('big_graph');
      if (big) big.src = gr.largeUrl('counter', '*', '', '', 'message_count') + '&_uniq=' + Date.now();
    }
    return NSQ.api('GET', '/counter').then(function (data) {
      self.answer(data);
      self.pollMs = Math.min(self.pollMs + POLL_STEP_MS, MAX_POLL_MS);
    }, function (err) {
      self.warningBox.replaceChildren(NSQ.alertBox('error', err.message));
      self.pollMs = MAX_POLL_MS;
    }).then(function () {
      if (self.alive()) setTimeout(self.poll.bind(self), self.pollMs);
    });
  };

  NSQ.pages.counter = function () {
    var numbers = h('div', { 'class': 'numbers', role: 'img' });
    var rateLine = h('p', { 'class': 'messagerate' });
    var warningBox = h('div');
    var counter = new Counter(numbers, rateLine, warningBox);
    var stage = h('div', { 'class': 'counter' }, numbers,
      h('p', { 'class': 'processed' }, 'Messages Processed'), rateLine,
      live.enabled ? live.cell('', '*', '', '*', 'rate', 'div') : null,
      gr.active ? h('img', { id: 'big_graph', 'class': 'graphite', width: 800, alt: 'messages per second',
        src: gr.largeUrl('counter', '*', '', '', 'message_count') }) : null);
    // the first answer is on the page before it is shown; the next polls run on their own
    return NSQ.api('GET', '/counter').then(function (data) {
      counter.answer(data);
      setTimeout(counter.poll.bind(counter), counter.pollMs);
      return [warningBox, stage];
    });
  };
})();
