-- size_svg.lua — the charts of `gen size --plot FILE`: a roofline per hardware (no --target-tps)
-- or the cluster $/hr bars for a target throughput, as a standalone SVG string. It draws what
-- size.lua computed; it writes no file and computes no size.
local R = require("size_report")
local si, money = R.si, R.money
local S = {}

local COLORS = { "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf" }

local function esc(s) return (tostring(s):gsub("&", "&amp;"):gsub("<", "&lt;"):gsub(">", "&gt;"):gsub('"', "&quot;")) end

function S.roofline(res, title)
  local W, H, ml, mr, mt, mb = 760, 480, 80, 200, 50, 60
  local pw, ph = W - ml - mr, H - mt - mb
  local xmin, xmax, ymin, ymax = math.huge, 0, math.huge, 0
  for _, r in ipairs(res) do
    local t = r.throughput
    local peak = r.peak_flops / 1e12
    xmin = math.min(xmin, t.intensity, t.balance); xmax = math.max(xmax, t.intensity, t.balance)
    ymax = math.max(ymax, peak)
    ymin = math.min(ymin, r.achieved_tflops)
  end
  -- whole decades on x; on y a little headroom above the highest peak
  local lx0 = math.floor(math.log(xmin, 10)) - 1
  local lx1 = math.ceil(math.log(xmax, 10)) + 1
  local ly1 = math.log(ymax, 10) + 0.25
  local ly0 = math.min(math.floor(math.log(ymin, 10)), math.floor(ly1) - 3)
  local function X(v) return ml + (math.log(v, 10) - lx0) / (lx1 - lx0) * pw end
  local function Y(v) return mt + ph - (math.log(v, 10) - ly0) / (ly1 - ly0) * ph end
  local o = {}
  local function w(...) o[#o + 1] = string.format(...) end
  w('<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">\n', W, H, W, H)
  w('<rect width="100%%" height="100%%" fill="white"/>\n')
  w('<text x="%d" y="24" font-size="15" font-weight="bold">%s</text>\n', ml, esc(title))
  -- grid and ticks
  for e = lx0, lx1 do
    local x = X(10 ^ e)
    w('<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#e0e0e0"/>\n', x, mt, x, mt + ph)
    w('<text x="%.1f" y="%d" text-anchor="middle">%s</text>\n', x, mt + ph + 16, esc(si(10 ^ e)))
  end
  for e = ly0, math.floor(ly1) do
    local y = Y(10 ^ e)
    w('<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#e0e0e0"/>\n', ml, y, ml + pw, y)
    w('<text x="%d" y="%.1f" text-anchor="end">%s</text>\n', ml - 6, y + 4, esc(si(10 ^ e)))
  end
  w('<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#333"/>\n', ml, mt, pw, ph)
  w('<text x="%.1f" y="%d" text-anchor="middle">arithmetic intensity (FLOP/byte of HBM traffic)</text>\n', ml + pw / 2, H - 18)
  w('<text transform="translate(20,%.1f) rotate(-90)" text-anchor="middle">attainable TFLOP/s per GPU</text>\n', mt + ph / 2)
  w('<clipPath id="plot"><rect x="%d" y="%d" width="%d" height="%d"/></clipPath>\n', ml, mt, pw, ph)
  for i, r in ipairs(res) do
    local c = COLORS[(i - 1) % #COLORS + 1]
    local t = r.throughput
    local peak = r.peak_flops / 1e12
    local bw = r.hbm_tbps -- TFLOP/s per FLOP/byte = TB/s
    local xa, xb = 10 ^ lx0, 10 ^ lx1
    local ridge = t.balance
    w('<polyline clip-path="url(#plot)" fill="none" stroke="%s" stroke-width="2" points="%.1f,%.1f %.1f,%.1f %.1f,%.1f"/>\n',
      c, X(xa), Y(math.max(xa * bw, 10 ^ ly0 / 10)), X(ridge), Y(peak), X(xb), Y(peak))
    local px, py = X(t.intensity), Y(r.achieved_tflops)
    w('<circle cx="%.1f" cy="%.1f" r="5" fill="%s" stroke="black"><title>%s: %s-bound, %s tokens/s/GPU</title></circle>\n',
      px, py, c, esc(r.name), esc(t.bound), esc(si(t.rate)))
    local ly = mt + 10 + (i - 1) * 38
    w('<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="2"/>\n', ml + pw + 12, ly, ml + pw + 32, ly, c)
    w('<circle cx="%d" cy="%d" r="4" fill="%s" stroke="black"/>\n', ml + pw + 22, ly, c)
    w('<text x="%d" y="%d">%s</text>\n', ml + pw + 38, ly + 4, esc(r.name))
    w('<text x="%d" y="%d" font-size="10" fill="#555">%s-bound, %s tok/s</text>\n', ml + pw + 38, ly + 17, esc(t.bound), esc(si(t.rate)))
  end
  w('<text x="%d" y="%d" font-size="10" fill="#555">lines: roofline min(peak, I·HBM); dots: the run (rate·F)</text>\n', ml, mt - 6)
  w('</svg>\n')
  return table.concat(o)
end

function S.bars(res, title)
  local W, mt, mb, ml, mr = 800, 50, 60, 150, 290
  local bh, gap = 26, 12
  local H = mt + mb + #res * (bh + gap)
  local pw = W - ml - mr
  local vmax = 0
  for _, r in ipairs(res) do vmax = math.max(vmax, r.cluster.usd_per_hr) end
  if vmax <= 0 then vmax = 1 end
  -- a "nice" tick step (1, 2, 2.5 or 5 × 10^k) and the axis end on a whole step
  local raw = vmax / 4
  local mag = 10 ^ math.floor(math.log(raw, 10))
  local step = mag * 10
  for _, f in ipairs({ 1, 2, 2.5, 5, 10 }) do if f * mag >= raw then step = f * mag; break end end
  local nticks = math.ceil(vmax / step - 1e-9)
  vmax = nticks * step
  local o = {}
  local function w(...) o[#o + 1] = string.format(...) end
  w('<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">\n', W, H, W, H)
  w('<rect width="100%%" height="100%%" fill="white"/>\n')
  w('<text x="%d" y="24" font-size="15" font-weight="bold">%s</text>\n', 20, esc(title))
  for k = 0, nticks do
    local v = step * k
    local x = ml + pw * k / nticks
    w('<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#e0e0e0"/>\n', x, mt - 4, x, H - mb)
    w('<text x="%.1f" y="%d" text-anchor="middle">%s</text>\n', x, H - mb + 16, esc(money(v)))
  end
  for i, r in ipairs(res) do
    local c = COLORS[(i - 1) % #COLORS + 1]
    local y = mt + (i - 1) * (bh + gap)
    local wd = math.max(1, pw * r.cluster.usd_per_hr / vmax)
    w('<text x="%d" y="%.1f" text-anchor="end">%s</text>\n', ml - 8, y + bh / 2 + 4, esc(r.name))
    w('<rect x="%d" y="%d" width="%.1f" height="%d" fill="%s"><title>%s</title></rect>\n', ml, y, wd, bh, c,
      esc(string.format("%s: %d GPUs, %s/hr", r.name, r.cluster.gpus, money(r.cluster.usd_per_hr))))
    w('<text x="%.1f" y="%.1f">%s/hr · %s GPUs · %s-bound</text>\n', ml + wd + 6, y + bh / 2 + 4,
      esc(money(r.cluster.usd_per_hr)), esc(tostring(r.cluster.gpus)), esc(r.throughput.bound))
  end
  w('<text x="%.1f" y="%d" text-anchor="middle">cluster $/hr for the target throughput</text>\n', ml + pw / 2, H - 18)
  w('</svg>\n')
  return table.concat(o)
end

return S
