#include "flywheel/observe/report_page.h"

#include <string>

#include "flywheel/core/strings.h"
#include "flywheel/observe/uplot_assets.h"

namespace flywheel {
namespace {

// The page. @TITLE@, @UPLOT_CSS@, @UPLOT_JS@ and @CONFIG@ are replaced; @CONFIG@ is a JSON object
// {"data": …} for a report or {"live": {"path", "refresh_s"}} for the live view.
constexpr std::string_view kTemplate = R"HTML(<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>@TITLE@</title>
<style>@UPLOT_CSS@</style>
<style>
body { font: 14px/1.4 system-ui, sans-serif; margin: 16px 20px; color: #222; }
h1 { font-size: 20px; margin: 0 0 4px; } h2 { font-size: 15px; margin: 0 0 4px; }
#report-status { color: #555; margin-bottom: 12px; }
#report-status.bad { color: #b00; }
table { border-collapse: collapse; margin: 6px 0 14px; }
td, th { border: 1px solid #ccc; padding: 3px 8px; text-align: left; }
.grid { display: grid; grid-template-columns: repeat(auto-fill, minmax(640px, 1fr)); gap: 14px; }
.panel { border: 1px solid #ddd; border-radius: 4px; padding: 8px; min-height: 120px; }
.note { color: #666; font-size: 13px; margin: 4px 0; }
.empty { color: #a60; font-style: italic; margin: 30px 0; }
</style></head>
<body>
<h1>@TITLE@</h1>
<div id="report-status">drawing…</div>
<div id="runs"></div>
<div class="grid" id="charts"></div>
<script>
window.reportErrors = [];
window.addEventListener('error', function (e) { window.reportErrors.push(String(e.message)); });
(function () {
  var original = console.error;
  console.error = function () {
    window.reportErrors.push(Array.prototype.join.call(arguments, ' '));
    original.apply(console, arguments);
  };
})();
</script>
<script>@UPLOT_JS@</script>
<script id="report-config" type="application/json">@CONFIG@</script>
<script>
(function () {
'use strict';
var COLORS = ['#1f77b4', '#d62728', '#2ca02c', '#ff7f0e', '#9467bd', '#8c564b', '#e377c2',
              '#17becf', '#7f7f7f', '#bcbd22'];
var charts = {};  // panel id -> uPlot

function num(v) { return typeof v === 'number' && isFinite(v) ? v : null; }
function esc(s) {
  return String(s).replace(/[&<>"]/g, function (c) {
    return {'&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;'}[c];
  });
}
function fmt(v, digits) { return typeof v === 'number' ? v.toFixed(digits) : '–'; }

// One line per run on a shared x axis: uPlot.join aligns the runs' x values (null gaps).
function overlay(runs, xOf, yOf) {
  var tables = [], series = [];
  runs.forEach(function (run, i) {
    var xs = [], ys = [];
    run.metrics.forEach(function (m) {
      var x = num(xOf(m)), y = num(yOf(m, run));
      if (x !== null && y !== null) { xs.push(x); ys.push(y); }
    });
    if (xs.length > 0) {
      tables.push([xs, ys]);
      series.push({label: run.name, color: COLORS[i % COLORS.length]});
    }
  });
  if (tables.length === 0) return null;
  return {data: uPlot.join(tables), series: series};
}

function lineChart(id, title, xLabel, yLabel, runs, xOf, yOf, emptyWhy, note) {
  var o = overlay(runs, xOf, yOf);
  if (o === null) return {id: id, title: title, empty: emptyWhy};
  return {id: id, title: title, xLabel: xLabel, yLabel: yLabel, data: o.data, series: o.series,
          note: note};
}

function elapsed(m) { return m.elapsed_s; }
function step(m) { return m.step; }

function stalenessChart(runs) {
  // Share of the trajectories trained at each lag (learner version - behaviour version), summed
  // over the run's steps; drawn as a stepped histogram so that runs overlay.
  var tables = [], series = [];
  runs.forEach(function (run, i) {
    var counts = {}, total = 0, maxLag = -1;
    run.metrics.forEach(function (m) {
      Object.keys(m.lag_counts || {}).forEach(function (k) {
        var lag = parseInt(k, 10), c = num(m.lag_counts[k]) || 0;
        counts[lag] = (counts[lag] || 0) + c;
        total += c;
        if (c > 0 && lag > maxLag) maxLag = lag;
      });
    });
    if (total === 0) return;
    var xs = [], ys = [];
    for (var lag = 0; lag <= maxLag + 1; lag++) {
      xs.push(lag);
      ys.push(lag <= maxLag ? (counts[lag] || 0) / total : (counts[maxLag] || 0) / total);
    }
    tables.push([xs, ys]);
    series.push({label: run.name, color: COLORS[i % COLORS.length], stepped: true, fill: true});
  });
  var title = 'Staleness: share of trained trajectories by lag (versions behind)';
  if (tables.length === 0) return {id: 'staleness', title: title, empty: 'no lag_counts in metrics.jsonl'};
  return {id: 'staleness', title: title, xLabel: 'lag', yLabel: 'share', data: uPlot.join(tables),
          series: series, note: 'lag k covers [k, k+1) on the x axis'};
}

function dropsChart(runs) {
  // metrics.jsonl's "dropped": buffer_* are running totals, learner_* are per step (summed here).
  var tables = [], series = [], nonzero = [];
  runs.forEach(function (run, i) {
    var keys = {};
    run.metrics.forEach(function (m) { Object.keys(m.dropped || {}).forEach(function (k) { keys[k] = 1; }); });
    var names = Object.keys(keys).sort();
    if (names.length === 0) return;
    var xs = [], totals = [], perKey = {}, sums = {};
    names.forEach(function (k) { perKey[k] = []; sums[k] = 0; });
    run.metrics.forEach(function (m) {
      var x = num(m.step);
      if (x === null) return;
      var total = 0;
      names.forEach(function (k) {
        var v = num((m.dropped || {})[k]) || 0;
        var value = k.indexOf('learner_') === 0 ? (sums[k] += v) : v;
        perKey[k].push(value);
        total += value;
      });
      xs.push(x);
      totals.push(total);
    });
    if (xs.length === 0) return;
    var color = COLORS[i % COLORS.length];
    tables.push([xs, totals]);
    series.push({label: run.name + ' total', color: color, width: 2});
    names.forEach(function (k, j) {
      if (perKey[k][perKey[k].length - 1] > 0) {
        tables.push([xs, perKey[k]]);
        series.push({label: run.name + ' ' + k, color: color, dash: [4 + 3 * j, 3]});
        nonzero.push(k);
      }
    });
  });
  var title = 'Drops (cumulative): stale, too long, incomplete groups, evicted';
  if (tables.length === 0) return {id: 'drops', title: title, empty: 'no "dropped" counters in metrics.jsonl'};
  return {id: 'drops', title: title, xLabel: 'step', yLabel: 'groups / trajectories', series: series,
          data: uPlot.join(tables),
          note: nonzero.length === 0 ? 'nothing was dropped in these runs' : null};
}

// CDF of the per-call environment latency: measured (summary.json's env_step_seconds, a
// histogram of every reset and step call, interpolated within its buckets) and, dashed, the
// distribution configured in [env.latency] of config.toml when it is a model the page knows.
function erf(x) {  // Abramowitz & Stegun 7.1.26, |error| < 1.5e-7
  var s = x < 0 ? -1 : 1, t = 1 / (1 + 0.3275911 * Math.abs(x));
  var y = 1 - (((((1.061405429 * t - 1.453152027) * t) + 1.421413741) * t - 0.284496736) * t +
               0.254829592) * t * Math.exp(-x * x);
  return s * y;
}
function latencyCdf(l) {
  var mean = num(l.mean_ms);
  if (!mean || mean <= 0) return null;
  if (l.model === 'constant') {
    return {hi: 2 * mean, cdf: function (x) { return x >= mean ? 1 : 0; }};
  }
  if (l.model === 'lognormal') {
    var sigma = num(l.sigma) || 1, mu = Math.log(mean) - sigma * sigma / 2;
    return {hi: Math.exp(mu + 2.33 * sigma),
            cdf: function (x) { return x <= 0 ? 0 : 0.5 * (1 + erf((Math.log(x) - mu) / (sigma * Math.SQRT2))); }};
  }
  if (l.model === 'pareto') {
    var alpha = num(l.alpha) || 1.5, tmin = mean * (alpha - 1) / alpha;
    return {hi: tmin * Math.pow(100, 1 / alpha),
            cdf: function (x) { return x < tmin ? 0 : 1 - Math.pow(tmin / x, alpha); }};
  }
  return null;
}
function measuredCdf(h) {  // h: {bounds_s, counts, count}
  if (!h || !h.count || !h.bounds_s || !h.counts) return null;
  var bounds = h.bounds_s.map(function (b) { return 1000 * b; }), counts = h.counts;
  var total = h.count, cum = [], c = 0, hi = bounds[bounds.length - 1];
  for (var b = 0; b < counts.length; b++) {
    c += counts[b];
    cum.push(c / total);
  }
  for (var k = 0; k < bounds.length; k++) {
    if (cum[k] >= 0.99) { hi = bounds[k]; break; }
  }
  return {hi: hi, cdf: function (x) {
    var before = 0;
    for (var b = 0; b < bounds.length; b++) {
      var lo = b === 0 ? 0 : bounds[b - 1];
      if (x <= bounds[b]) return before + (cum[b] - before) * Math.max(0, x - lo) / (bounds[b] - lo);
      before = cum[b];
    }
    return 1;
  }};
}
function latencyChart(runs) {
  var title = 'Environment latency per call (CDF)';
  var curves = [], hi = 0, measured = 0;
  runs.forEach(function (run, i) {
    var m = measuredCdf((run.summary || {}).env_step_seconds);
    if (m !== null) {
      measured++;
      curves.push({label: run.name + ' (measured, ' + run.summary.env_step_seconds.count + ' calls)',
                   i: i, c: m, dash: false});
      hi = Math.max(hi, m.hi);
    }
    var l = run.env_latency, c = l ? latencyCdf(l) : null;
    if (c !== null) {
      curves.push({label: run.name + ' (configured ' + l.model + ', mean ' + l.mean_ms + ' ms)',
                   i: i, c: c, dash: true, stepped: l.model === 'constant'});
      hi = Math.max(hi, c.hi);
    }
  });
  if (curves.length === 0) {
    return {id: 'latency', title: title,
            empty: 'no measured environment latency in summary.json and no latency model in config.toml'};
  }
  var xs = [];
  for (var k = 0; k <= 200; k++) xs.push(hi * k / 200);
  var data = [xs], series = [];
  curves.forEach(function (v) {
    data.push(xs.map(v.c.cdf));
    series.push({label: v.label, color: COLORS[v.i % COLORS.length], stepped: !!v.stepped,
                 dash: v.dash ? [6, 4] : undefined});
  });
  return {id: 'latency', title: title, xLabel: 'ms', yLabel: 'P(latency ≤ x)', data: data,
          series: series,
          note: measured === 0 ? 'no run measured its calls (summary.json without env_step_seconds): the configured distribution only' : null};
}

function rolesCharts(runs) {
  // One chart per elastic run: a row per cell, high = training, low = rollout. Core cells always
  // train; satellites start in rollout and flip at each scheduler.jsonl switch.
  var out = [];
  runs.forEach(function (run) {
    if (!run.cells) return;
    var id = 'roles-' + run.name.replace(/[^A-Za-z0-9_-]/g, '_');
    var title = 'Roles of the cells over time: ' + run.name;
    var core = run.cells.core, sats = run.cells.satellites;
    var end = 0;
    if (run.summary && num(run.summary.wall_seconds) !== null) end = run.summary.wall_seconds;
    run.metrics.forEach(function (m) { end = Math.max(end, num(m.elapsed_s) || 0); });
    run.switches.forEach(function (s) { end = Math.max(end, num(s.at_s) || 0); });
    if (core + sats === 0 || end <= 0) {
      out.push({id: id, title: title, empty: 'no cells or no time recorded yet'});
      return;
    }
    var labels = [], tables = [], series = [];
    for (var c = 0; c < core; c++) {
      var row = labels.length;
      labels.push('core ' + c);
      tables.push([[0, end], [row + 0.8, row + 0.8]]);
      series.push({label: 'core ' + c, color: COLORS[row % COLORS.length], stepped: true});
    }
    for (var s = 0; s < sats; s++) {
      var r = labels.length, xs = [0], ys = [r], switches = 0;
      run.switches.forEach(function (e) {
        if (e.satellite !== s || num(e.at_s) === null) return;
        xs.push(e.at_s); ys.push(e.to === 'train' ? r + 0.8 : r); switches++;
      });
      xs.push(end); ys.push(ys[ys.length - 1]);
      labels.push('sat ' + s);
      tables.push([xs, ys]);
      series.push({label: 'sat ' + s + ' (' + switches + ' switches)', color: COLORS[r % COLORS.length],
                   stepped: true});
    }
    out.push({id: id, title: title, xLabel: 's', yLabel: '', data: uPlot.join(tables), series: series,
              rows: labels, note: 'high = training, low = rollout; ' + run.switches.length + ' switches'});
  });
  return out;
}

function specs(runs) {
  var list = [
    lineChart('reward-time', 'Reward against wall time', 's', 'reward_mean', runs, elapsed,
              function (m) { return m.reward_mean; }, 'no reward_mean in metrics.jsonl'),
    lineChart('reward-step', 'Reward against learner steps', 'step', 'reward_mean', runs, step,
              function (m) { return m.reward_mean; }, 'no reward_mean in metrics.jsonl'),
    lineChart('success-time', 'Success rate against wall time', 's', 'success_rate', runs, elapsed,
              function (m) { return m.success_rate; }, 'no success_rate in metrics.jsonl'),
    lineChart('success-step', 'Success rate against learner steps', 'step', 'success_rate', runs,
              step, function (m) { return m.success_rate; }, 'no success_rate in metrics.jsonl'),
    lineChart('learner-util', 'Learner utilisation: busy share of each step', 's', 'busy / (busy + wait)',
              runs, elapsed, function (m) {
                var b = num(m.learner_busy_s), w = num(m.learner_wait_s);
                return b === null || w === null || b + w <= 0 ? null : b / (b + w);
              }, 'no learner_busy_s / learner_wait_s in metrics.jsonl'),
    lineChart('learner-wait', 'Learner wait for data per step', 'step', 's', runs, step,
              function (m) { return m.learner_wait_s; }, 'no learner_wait_s in metrics.jsonl'),
    stalenessChart(runs),
    dropsChart(runs),
    lineChart('tokens', 'Generated tokens per second', 's', 'tokens/s', runs, elapsed,
              function (m) { return m.tokens_per_s; },
              'no tokens_per_s in these runs\' metrics.jsonl (the elastic job does not write it)'),
    latencyChart(runs)
  ];
  return list.concat(rolesCharts(runs));
}

function width() { return Math.max(560, Math.min(900, Math.floor((window.innerWidth - 80) / 2))); }

function options(spec) {
  var series = [{label: spec.xLabel}];
  spec.series.forEach(function (s) {
    series.push({
      label: s.label, stroke: s.color, width: s.width || 1.5, dash: s.dash, spanGaps: true,
      fill: s.fill ? s.color + '33' : undefined,
      paths: s.stepped ? uPlot.paths.stepped({align: 1}) : undefined,
      points: {show: false}
    });
  });
  var y = {label: spec.yLabel};
  if (spec.rows) {
    y.splits = function () { return spec.rows.map(function (_, i) { return i + 0.4; }); };
    y.values = function (u, splits) { return splits.map(function (v) { return spec.rows[Math.round(v - 0.4)] || ''; }); };
    y.size = 60;
  }
  return {width: width(), height: 260, series: series,
          scales: {x: {time: false}, y: spec.rows ? {range: [-0.2, spec.rows.length]} : {}},
          axes: [{label: spec.xLabel}, y], legend: {live: false}};
}

function hasData(data) {
  for (var i = 1; i < data.length; i++) {
    for (var j = 0; j < data[i].length; j++) if (num(data[i][j]) !== null) return true;
  }
  return false;
}

function panel(id, title) {
  var el = document.getElementById('panel-' + id);
  if (!el) {
    el = document.createElement('div');
    el.className = 'panel';
    el.id = 'panel-' + id;
    el.innerHTML = '<h2></h2><div class="note"></div><div class="plot"></div>';
    document.getElementById('charts').appendChild(el);
  }
  el.querySelector('h2').textContent = title;
  return el;
}

function draw(spec) {
  var el = panel(spec.id, spec.title);
  var note = el.querySelector('.note'), plot = el.querySelector('.plot');
  var old = charts[spec.id];
  if (spec.empty) {
    if (old) { old.destroy(); delete charts[spec.id]; }
    note.textContent = '';
    plot.innerHTML = '<div class="empty">No data: ' + esc(spec.empty) + '.</div>';
    return;
  }
  note.textContent = spec.note || '';
  var key = JSON.stringify(spec.series.map(function (s) { return s.label; }));
  if (old && old.seriesKey === key) {
    old.setData(spec.data);
    return;
  }
  if (old) old.destroy();
  plot.innerHTML = '';
  var u = new uPlot(options(spec), spec.data, plot);
  u.seriesKey = key;
  charts[spec.id] = u;
}

function auditRow(run) {
  var s = run.summary || {}, a = s.latency_audit || {};
  var finished = num(s.episodes_finished) || num(s.episodes_inserted);
  var envWait = num(a.env_wait_seconds);
  var util = num(a.learner_utilization) !== null ? a.learner_utilization : s.learner_utilization;
  return '<tr><td>' + esc(run.name) + '</td><td>' + esc(s.mode || '–') + '</td><td>' +
      (run.metrics.length ? run.metrics[run.metrics.length - 1].step : '–') + '</td><td>' +
      fmt(s.wall_seconds, 1) + '</td><td>' + fmt(s.last_reward_mean, 3) + '</td><td>' +
      fmt(s.last_success_rate, 3) + '</td><td>' + fmt(util, 2) + '</td><td>' +
      fmt(a.learner_wait_fraction, 2) + '</td><td>' + fmt(a.generation_utilization, 2) + '</td><td>' +
      (envWait !== null && finished ? fmt(1000 * envWait / finished, 1) : '–') + '</td><td>' +
      (a.episodes_in_flight !== undefined ? a.episodes_in_flight : '–') + '</td><td>' +
      (a.suggested_episodes_in_flight ? a.suggested_episodes_in_flight : (a.learner_fed ? 'fed' : '–')) +
      '</td><td>' + esc(s.verdict || a.verdict || (run.summary ? '' : 'running (no summary.json yet)')) +
      '</td></tr>';
}

function drawRuns(runs) {
  var notes = [];
  runs.forEach(function (run) {
    (run.notes || []).forEach(function (n) { notes.push(run.name + ': ' + n); });
  });
  document.getElementById('runs').innerHTML =
      '<h2>Runs and latency audit</h2><table><tr><th>run</th><th>mode</th><th>steps</th>' +
      '<th>wall s</th><th>last reward</th><th>last success</th><th>learner busy</th>' +
      '<th>learner wait</th><th>generation busy</th><th>env wait ms / episode</th>' +
      '<th>episodes in flight</th><th>recommended</th><th>verdict</th></tr>' +
      runs.map(auditRow).join('') + '</table>' +
      notes.map(function (n) { return '<div class="note">' + esc(n) + '</div>'; }).join('');
}

function render(data, live) {
  var runs = data.runs || [];
  drawRuns(runs);
  var list = specs(runs), drawn = 0, nonempty = 0, empty = [];
  list.forEach(function (spec) {
    draw(spec);
    if (spec.empty) { empty.push(spec.title); return; }
    drawn++;
    if (hasData(charts[spec.id].data)) nonempty++;
  });
  var status = document.getElementById('report-status');
  status.dataset.charts = drawn;
  status.dataset.nonempty = nonempty;
  status.dataset.nodata = empty.length;
  status.dataset.errors = window.reportErrors.length;
  status.className = window.reportErrors.length ? 'bad' : '';
  status.textContent = runs.length + ' run(s); charts drawn: ' + drawn + ', with data: ' + nonempty +
      ', without data: ' + empty.length + '; script errors: ' + window.reportErrors.length +
      (window.reportErrors.length ? ' (' + window.reportErrors.join('; ') + ')' : '') +
      (live ? '; live, updated ' + new Date().toLocaleTimeString() : '');
}

var config = JSON.parse(document.getElementById('report-config').textContent);
if (config.data) {
  render(config.data, false);
} else {
  var refresh = function () {
    fetch(config.live.path, {cache: 'no-store'})
        .then(function (r) { return r.json(); })
        .then(function (data) {
          if (data.error) throw new Error(data.error);
          render(data, true);
        })
        .catch(function (e) {
          var status = document.getElementById('report-status');
          status.className = 'bad';
          status.textContent = 'live: ' + e.message + ' (retrying)';
        })
        .then(function () { setTimeout(refresh, 1000 * config.live.refresh_s); });
  };
  refresh();
}
})();
</script>
</body></html>
)HTML";

void ReplaceAll(std::string& text, std::string_view from, std::string_view to) {
  for (size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size())) {
    text.replace(at, from.size(), to);
  }
}

// "</" cannot appear inside a <script> element: JSON may spell it "<\/".
std::string ScriptSafeJson(const nlohmann::json& value) {
  std::string text = value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  ReplaceAll(text, "</", "<\\/");
  return text;
}

std::string Render(std::string_view title, const nlohmann::json& config) {
  std::string escaped_title(title);
  ReplaceAll(escaped_title, "&", "&amp;");
  ReplaceAll(escaped_title, "<", "&lt;");
  ReplaceAll(escaped_title, "@", "&#64;");  // no placeholder can come from the title
  std::string page(kTemplate);
  ReplaceAll(page, "@TITLE@", escaped_title);
  // In reverse order of the page, so that each find meets the placeholder before any text
  // already inserted (uPlot or the data could contain a placeholder's spelling).
  page.replace(page.find("@CONFIG@"), 8, ScriptSafeJson(config));
  page.replace(page.find("@UPLOT_JS@"), 10, UplotJs());
  page.replace(page.find("@UPLOT_CSS@"), 11, UplotCss());
  return page;
}

}  // namespace

std::string RenderReportPage(const nlohmann::json& data, std::string_view title) {
  return Render(title, {{"data", data}});
}

std::string RenderLivePage(std::string_view data_path, int refresh_seconds,
                           std::string_view title) {
  return Render(title, {{"live", {{"path", data_path}, {"refresh_s", refresh_seconds}}}});
}

}  // namespace flywheel
