/* html_script.js - the HTML report's chart (inlined by sim/run/html.c).
 * Draws the worst rank's memory from the JSON in #vsim-data on #chart:
 * each point [t, bytes per category (bottom first), reserved + framework,
 * op label] holds until the next point, stacked by category; the device's
 * use as a black line, the capacity dashed red, the peak and a first
 * out-of-memory as vertical markers. The mouse wheel zooms around the
 * pointer, a drag zooms into the dragged range, Reset or a double-click
 * shows the whole step again; hovering shows the moment's op, layer,
 * micro-batch and bytes. Once drawn, #render-status reads "rendered". */
(function () {
  'use strict';
  var D = JSON.parse(document.getElementById('vsim-data').textContent);
  var canvas = document.getElementById('chart');
  var tip = document.getElementById('tip');
  var ctx = canvas.getContext('2d');
  var M = {left: 78, right: 16, top: 16, bottom: 36};
  var K = D.categories.length;
  var P = D.points;
  var step = D.step > 0 ? D.step : 1e-9;
  var ytop = Math.max(D.capacity, D.peak_bytes, 1) * 1.05;
  var view = {t0: 0, t1: step};
  var drag = null;
  var hoverIdx = -1;
  var hoverX = null;
  var W = 960, H = 420;

  function fmtBytes(b) {
    var names = ['B', 'KiB', 'MiB', 'GiB', 'TiB', 'PiB'];
    var v = b, i = 0;
    while (v >= 1023.5 && i + 1 < names.length) { v /= 1024; i++; }
    if (i === 0) return Math.round(b) + ' B';
    return v.toFixed(v >= 99.95 ? 0 : v >= 9.995 ? 1 : 2) + ' ' + names[i];
  }
  function fmtSec(s) {
    if (s === 0) return '0 s';
    if (s >= 999.5) return s.toFixed(0) + ' s';
    if (s >= 0.9995) return s.toPrecision(3) + ' s';
    if (s >= 0.9995e-3) return (s * 1e3).toPrecision(3) + ' ms';
    return (s * 1e6).toPrecision(3) + ' us';
  }
  function plotW() { return W - M.left - M.right; }
  function plotH() { return H - M.top - M.bottom; }
  function X(t) { return M.left + (t - view.t0) / (view.t1 - view.t0) * plotW(); }
  function T(x) { return view.t0 + (x - M.left) / plotW() * (view.t1 - view.t0); }
  function Y(b) { return M.top + plotH() - plotH() * b / ytop; }
  function endOf(i) { return i + 1 < P.length ? P[i + 1][0] : step; }

  /* The last point at or before t (-1 before the first). */
  function pointAt(t) {
    var lo = 0, hi = P.length - 1, found = -1;
    while (lo <= hi) {
      var mid = (lo + hi) >> 1;
      if (P[mid][0] <= t) { found = mid; lo = mid + 1; } else { hi = mid - 1; }
    }
    return found;
  }

  function resize() {
    var ratio = window.devicePixelRatio || 1;
    var rect = canvas.getBoundingClientRect();
    W = Math.max(320, Math.round(rect.width) || 960);
    H = Math.max(200, Math.round(rect.height) || 420);
    canvas.width = Math.round(W * ratio);
    canvas.height = Math.round(H * ratio);
    ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
  }

  function drawAreas() {
    for (var i = 0; i < P.length; i++) {
      var ta = P[i][0], tb = endOf(i);
      if (tb < view.t0 || ta > view.t1) continue;
      var xa = Math.max(X(ta), M.left), xb = Math.min(X(tb), W - M.right);
      var w = Math.max(xb - xa, 0.6), sum = 0;
      for (var k = 0; k < K; k++) {
        var h = P[i][1 + k];
        if (h > 0) {
          ctx.fillStyle = D.colors[k];
          ctx.fillRect(xa, Y(sum + h), w, Y(sum) - Y(sum + h));
        }
        sum += h;
      }
    }
  }

  function drawLines() {
    ctx.strokeStyle = '#000';
    ctx.lineWidth = 1.5;
    ctx.beginPath();
    for (var i = 0; i < P.length; i++) {
      var y = Y(P[i][1 + K]);
      if (i === 0) ctx.moveTo(X(P[i][0]), y); else ctx.lineTo(X(P[i][0]), y);
      ctx.lineTo(X(endOf(i)), y);
    }
    ctx.stroke();
    ctx.strokeStyle = '#d00';
    ctx.lineWidth = 1;
    ctx.setLineDash([6, 4]);
    ctx.beginPath();
    ctx.moveTo(M.left, Y(D.capacity));
    ctx.lineTo(W - M.right, Y(D.capacity));
    ctx.stroke();
    ctx.setLineDash([]);
  }

  function marker(t, color, text, row) {
    var x = X(t);
    if (x < M.left || x > W - M.right) return;
    ctx.strokeStyle = color;
    ctx.fillStyle = color;
    ctx.beginPath();
    ctx.moveTo(x, M.top);
    ctx.lineTo(x, M.top + plotH());
    ctx.stroke();
    var right = x > M.left + plotW() / 2;
    ctx.textAlign = right ? 'right' : 'left';
    ctx.fillText(text, right ? x - 4 : x + 4, M.top + 12 + 14 * row);
  }

  function drawAxes() {
    ctx.fillStyle = '#000';
    ctx.strokeStyle = '#000';
    ctx.lineWidth = 1;
    ctx.font = '12px sans-serif';
    ctx.beginPath();
    ctx.moveTo(M.left, M.top + plotH());
    ctx.lineTo(W - M.right, M.top + plotH());
    ctx.moveTo(M.left, M.top);
    ctx.lineTo(M.left, M.top + plotH());
    ctx.stroke();
    for (var i = 0; i <= 4; i++) {
      var b = ytop / 1.05 * i / 4, t = view.t0 + (view.t1 - view.t0) * i / 4;
      ctx.textAlign = 'right';
      ctx.fillText(fmtBytes(b), M.left - 6, Y(b) + 4);
      ctx.textAlign = i === 0 ? 'left' : i === 4 ? 'right' : 'center';
      ctx.fillText(fmtSec(t), X(t), M.top + plotH() + 16);
    }
    ctx.textAlign = 'center';
    ctx.fillText('time in the step', M.left + plotW() / 2, H - 4);
  }

  function drawOverlay() {
    if (drag && drag.x1 !== undefined) {
      ctx.fillStyle = 'rgba(80, 120, 200, 0.2)';
      ctx.fillRect(Math.min(drag.x0, drag.x1), M.top,
                   Math.abs(drag.x1 - drag.x0), plotH());
    }
    if (hoverIdx >= 0 && hoverX !== null) {
      ctx.strokeStyle = '#555';
      ctx.beginPath();
      ctx.moveTo(hoverX, M.top);
      ctx.lineTo(hoverX, M.top + plotH());
      ctx.stroke();
    }
  }

  function draw() {
    ctx.clearRect(0, 0, W, H);
    ctx.save();
    ctx.beginPath();
    ctx.rect(M.left, M.top - 1, plotW(), plotH() + 1);
    ctx.clip();
    drawAreas();
    drawLines();
    ctx.font = '12px sans-serif';
    marker(D.peak_t, '#000', 'peak ' + fmtBytes(D.peak_bytes), 0);
    if (D.oom_t !== null) marker(D.oom_t, '#d00', 'out of memory', 1);
    drawOverlay();
    ctx.restore();
    drawAxes();
    document.getElementById('range').textContent =
      'showing ' + fmtSec(view.t0) + ' to ' + fmtSec(view.t1) + ' of ' + fmtSec(step);
  }

  /* What the tooltip says about point i. */
  function describe(i) {
    var p = P[i], lines = ['t = ' + p[0].toFixed(6) + ' s', p[2 + K]], alloc = 0;
    for (var k = K - 1; k >= 0; k--) {
      lines.push(D.categories[k] + ': ' + fmtBytes(p[1 + k]));
      if (D.categories[k] !== 'framework') alloc += p[1 + k];
    }
    lines.push('allocated: ' + fmtBytes(alloc));
    lines.push('reserved + framework: ' + fmtBytes(p[1 + K]));
    return lines.join('\n');
  }

  function localX(e) { return e.clientX - canvas.getBoundingClientRect().left; }

  function hover(e) {
    var x = localX(e);
    if (x < M.left || x > W - M.right) { hoverIdx = -1; tip.hidden = true; draw(); return; }
    hoverIdx = pointAt(T(x));
    hoverX = x;
    if (hoverIdx < 0) { tip.hidden = true; draw(); return; }
    tip.textContent = describe(hoverIdx);
    tip.hidden = false;
    var y = e.clientY - canvas.getBoundingClientRect().top;
    tip.style.left = (x + 240 > W ? x - 240 : x + 14) + 'px';
    tip.style.top = Math.max(0, y - 20) + 'px';
    draw();
  }

  function setView(t0, t1) {
    var span = Math.max(t1 - t0, step * 1e-6, 1e-12);
    if (span >= step) { view.t0 = 0; view.t1 = step; return; }
    t0 = Math.min(Math.max(t0, 0), step - span);
    view.t0 = t0;
    view.t1 = t0 + span;
  }

  canvas.addEventListener('wheel', function (e) {
    e.preventDefault();
    var c = T(Math.min(Math.max(localX(e), M.left), W - M.right));
    var f = e.deltaY > 0 ? 1.25 : 0.8;
    setView(c - (c - view.t0) * f, c + (view.t1 - c) * f);
    draw();
  }, {passive: false});
  canvas.addEventListener('mousedown', function (e) { drag = {x0: localX(e)}; });
  canvas.addEventListener('mousemove', function (e) {
    if (drag) { drag.x1 = localX(e); draw(); } else { hover(e); }
  });
  window.addEventListener('mouseup', function () {
    if (drag && drag.x1 !== undefined && Math.abs(drag.x1 - drag.x0) > 4) {
      var a = T(Math.min(drag.x0, drag.x1)), b = T(Math.max(drag.x0, drag.x1));
      setView(Math.max(a, view.t0), Math.min(b, view.t1));
    }
    drag = null;
    draw();
  });
  canvas.addEventListener('mouseleave', function () {
    hoverIdx = -1; hoverX = null; tip.hidden = true; draw();
  });
  function reset() { setView(0, step); draw(); }
  canvas.addEventListener('dblclick', reset);
  document.getElementById('reset').addEventListener('click', reset);
  window.addEventListener('resize', function () { resize(); draw(); });

  var legend = document.getElementById('legend');
  for (var k = K - 1; k >= 0; k--) {
    var item = document.createElement('span');
    var sw = document.createElement('span');
    sw.className = 'swatch';
    sw.style.background = D.colors[k];
    item.appendChild(sw);
    item.appendChild(document.createTextNode(D.categories[k]));
    legend.appendChild(item);
  }
  legend.appendChild(document.createTextNode(
    '   black line: reserved + framework; dashed red: capacity ' +
    fmtBytes(D.capacity)));

  resize();
  draw();
  document.getElementById('render-status').textContent =
    'rendered ' + P.length + ' points';
})();
