// Dashboard charts. Each <canvas data-chart="kind" data-src="json url"> draws itself from
// its JSON endpoint; data-drill (a trace-list URL) makes bars and slices open the matching
// traces. A sibling [data-empty] is shown instead when there is nothing to draw.
(function () {
  "use strict";

  var PALETTE = [
    "#b3261e", "#2457c5", "#8a5a00", "#137333", "#7b1fa2", "#00838f", "#c2185b",
    "#5d4037", "#455a64", "#f57c00", "#1a237e", "#558b2f", "#6a1b9a", "#00695c",
    "#ad1457", "#283593", "#9e9d24", "#4e342e", "#37474f", "#d84315",
  ];

  function color(index) {
    return PALETTE[index % PALETTE.length];
  }

  function bucketLabel(iso, bucket) {
    // The server sends UTC ISO strings; the axis shows them in UTC like the rest of the page.
    return bucket === "hour" ? iso.slice(5, 10) + " " + iso.slice(11, 13) + ":00" : iso.slice(0, 10);
  }

  function drillTo(canvas, params) {
    var url = new URL(canvas.dataset.drill, window.location.origin);
    Object.keys(params).forEach(function (name) {
      url.searchParams.set(name, params[name]);
    });
    window.location.assign(url.pathname + url.search);
  }

  function showEmpty(canvas) {
    canvas.hidden = true;
    var empty = canvas.parentElement.querySelector("[data-empty]");
    if (empty) empty.hidden = false;
  }

  function clickedElement(chart, event) {
    var hits = chart.getElementsAtEventForMode(event, "nearest", { intersect: true }, true);
    return hits.length ? hits[0] : null;
  }

  var builders = {
    runs: function (canvas, data) {
      var total = data.series.runs.reduce(function (a, b) { return a + b; }, 0);
      if (!total) return null;
      var names = { runs: "runs", successes: "successes", handovers: "handed over" };
      return {
        type: "line",
        data: {
          labels: data.buckets.map(function (b) { return bucketLabel(b, data.bucket); }),
          datasets: Object.keys(names).map(function (key, i) {
            return { label: names[key], data: data.series[key], borderColor: color(i + 1),
                     backgroundColor: color(i + 1), tension: 0.2, pointRadius: 0 };
          }),
        },
        options: { interaction: { mode: "index", intersect: false } },
      };
    },

    failures: function (canvas, data) {
      if (!data.total) return null;
      return {
        type: "bar",
        data: {
          labels: data.buckets.map(function (b) { return bucketLabel(b, data.bucket); }),
          datasets: data.series.map(function (s, i) {
            return { label: s.error_type, data: s.counts, backgroundColor: color(i) };
          }),
        },
        options: {
          scales: { x: { stacked: true }, y: { stacked: true, beginAtZero: true } },
          onClick: function (event, elements, chart) {
            var hit = clickedElement(chart, event);
            if (!hit) return;
            drillTo(canvas, {
              step_error: data.series[hit.datasetIndex].error_type,
              since: data.buckets[hit.index],
              until: data.bucket_ends[hit.index],
            });
          },
        },
      };
    },

    rollout: function (canvas, data) {
      // Canary against stable, one metric per canvas (data-metric), per time bucket.
      if (!data.buckets.length) return null;
      var metric = canvas.dataset.metric;
      var names = { error_rate: "error rate", p95_ms: "p95 latency (ms)" };
      return {
        type: "line",
        data: {
          labels: data.buckets.map(function (b) {
            return data.bucket === "minute" ? b.slice(11, 16) : bucketLabel(b, data.bucket);
          }),
          datasets: [data.canary, data.stable].map(function (arm, i) {
            return { label: (i ? "stable " : "canary ") + arm.label + " " + names[metric],
                     data: arm[metric], borderColor: color(i ? 1 : 0), backgroundColor: color(i ? 1 : 0),
                     spanGaps: true, tension: 0.2 };
          }),
        },
        options: { interaction: { mode: "index", intersect: false },
                   scales: { y: { beginAtZero: true } } },
      };
    },

    guard: function (canvas, data) {
      // A guarded metric (data-metric): the canary's difference from stable, its interval
      // (rates: over every run since the start) and the line the evaluator acts on.
      var guard = data.guard[canvas.dataset.metric];
      if (!guard.diff.some(function (v) { return v !== null; })) return null;
      var labels = data.buckets.map(function (b) {
        return data.bucket === "minute" ? b.slice(11, 16) : bucketLabel(b, data.bucket);
      });
      var datasets = [];
      if (guard.high) {
        // The band between the bounds; each bound also marked per bucket (a dash), so that
        // a rollout with one bucket so far still shows its interval.
        var band = "rgba(36, 87, 197, 0.15)", edge = "rgba(36, 87, 197, 0.6)";
        var level = Math.round((1 - data.guard.alpha) * 100) + "% interval";
        datasets.push({ label: level, data: guard.high, borderColor: edge, backgroundColor: edge,
                        pointStyle: "line", pointRadius: 8, borderWidth: 1, spanGaps: true,
                        fill: false });
        datasets.push({ label: level + " (low)", data: guard.low, borderColor: edge,
                        backgroundColor: band, pointStyle: "line", pointRadius: 8, borderWidth: 1,
                        spanGaps: true, fill: "-1" });
      }
      datasets.push({ label: "canary − stable", data: guard.diff, borderColor: color(1),
                      backgroundColor: color(1), spanGaps: true, tension: 0.2 });
      if (guard.threshold === null) {
        return { type: "line", data: { labels: labels, datasets: datasets },
                 options: { interaction: { mode: "index", intersect: false } } };
      }
      datasets.push({ label: guard.threshold ? "rollback line (" + guard.threshold + ")" : "no difference",
                      data: labels.map(function () { return guard.threshold; }),
                      borderColor: color(0), backgroundColor: color(0), borderDash: [6, 4],
                      // a line needs two buckets; with one, a dash marks the level
                      pointStyle: "line", pointRadius: labels.length > 1 ? 0 : 10 });
      return {
        type: "line",
        data: { labels: labels, datasets: datasets },
        options: {
          interaction: { mode: "index", intersect: false },
          // One legend entry for the band, not one per bound.
          plugins: { legend: { labels: { filter: function (item) {
            return item.text.slice(-6) !== " (low)";
          } } } },
        },
      };
    },

    breakdown: function (canvas, data, type) {
      if (!data.items.length) return null;
      return {
        type: type,
        data: {
          labels: data.items.map(function (item) { return item.value; }),
          datasets: [{
            label: "failed steps",
            data: data.items.map(function (item) { return item.count; }),
            backgroundColor: data.items.map(function (item, i) { return color(i); }),
          }],
        },
        options: {
          indexAxis: type === "bar" ? "y" : "x",
          // Endpoints show their path (the tooltip keeps the host); long ones keep their end.
          scales: type === "bar" ? { y: { ticks: { callback: function (value) {
            var label = this.getLabelForValue(value);
            if (canvas.dataset.param === "endpoint" && label.indexOf("/") > 0) {
              label = label.slice(label.indexOf("/"));
            }
            return label.length > 26 ? "…" + label.slice(-25) : label;
          } } } } : {},
          plugins: { legend: { display: type !== "bar" } },
          onClick: function (event, elements, chart) {
            var hit = clickedElement(chart, event);
            if (!hit) return;
            var params = {};
            params[canvas.dataset.param] = data.items[hit.index].value;
            drillTo(canvas, params);
          },
        },
      };
    },
  };

  // One request per data source, whatever the number of canvases drawn from it.
  var loads = {};

  function load(src) {
    if (!loads[src]) {
      loads[src] = fetch(src, { credentials: "same-origin", headers: { Accept: "application/json" } })
        .then(function (response) {
          if (!response.ok) throw new Error(response.status + " " + response.statusText);
          return response.json();
        });
    }
    return loads[src];
  }

  function draw(canvas) {
    load(canvas.dataset.src)
      .then(function (data) {
        var kind = canvas.dataset.chart;
        var config = kind === "bar" || kind === "doughnut"
          ? builders.breakdown(canvas, data, kind)
          : builders[kind](canvas, data);
        if (!config) {
          showEmpty(canvas);
        } else {
          config.options = Object.assign({ responsive: true, maintainAspectRatio: false, animation: false },
                                         config.options);
          new window.Chart(canvas, config);
        }
        canvas.dataset.ready = "1";
      })
      .catch(function (error) {
        var empty = canvas.parentElement.querySelector("[data-empty]");
        if (empty) empty.textContent = "This chart could not load (" + error.message + "). Reload the page.";
        showEmpty(canvas);
        canvas.dataset.ready = "error";
      });
  }

  document.addEventListener("DOMContentLoaded", function () {
    document.querySelectorAll("canvas[data-chart]").forEach(draw);
  });
})();
