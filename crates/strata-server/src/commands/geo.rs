//! GEO commands: places kept as members of a sorted set whose score is the place's 52-bit
//! geohash (26 bits of latitude and 26 of longitude, interleaved), as Redis keeps them, so
//! that ZRANGE, ZREM and the rest work on them too.
//!
//! A search by radius or by box walks only the score ranges of the geohash cells that can
//! hold a match: the cell around the centre, at the finest precision whose cells are at
//! least as large as the search area, and its eight neighbours. Each place found there is
//! then checked exactly (the haversine distance, or the box's two distances), so the cells
//! decide the cost and never the answer.

use std::ops::Bound;

use super::zsets::ZSet;
use super::{Ctx, Outcome, syntax, upper};
use crate::store;

/// The latitudes a geohash covers (Web Mercator's), and the longitudes.
const LAT_MIN: f64 = -85.05112878;
const LAT_MAX: f64 = 85.05112878;
const LON_MIN: f64 = -180.0;
const LON_MAX: f64 = 180.0;
/// Bits of each coordinate.
const STEP: u32 = 26;
/// The earth's radius in metres, as Redis measures distances.
const EARTH_RADIUS: f64 = 6372797.560856;
const GEOHASH_ALPHABET: &[u8] = b"0123456789bcdefghjkmnpqrstuvwxyz";

/// Spreads the 26 low bits of `v` to the even bits of the result.
fn spread(v: u32) -> u64 {
    let mut x = u64::from(v);
    x = (x | (x << 16)) & 0x0000_FFFF_0000_FFFF;
    x = (x | (x << 8)) & 0x00FF_00FF_00FF_00FF;
    x = (x | (x << 4)) & 0x0F0F_0F0F_0F0F_0F0F;
    x = (x | (x << 2)) & 0x3333_3333_3333_3333;
    (x | (x << 1)) & 0x5555_5555_5555_5555
}

/// The even bits of `x`, gathered.
fn squash(x: u64) -> u32 {
    let mut x = x & 0x5555_5555_5555_5555;
    x = (x | (x >> 1)) & 0x3333_3333_3333_3333;
    x = (x | (x >> 2)) & 0x0F0F_0F0F_0F0F_0F0F;
    x = (x | (x >> 4)) & 0x00FF_00FF_00FF_00FF;
    x = (x | (x >> 8)) & 0x0000_FFFF_0000_FFFF;
    ((x | (x >> 16)) & 0x0000_0000_FFFF_FFFF) as u32
}

/// The cell of `v` in `[min, max)` cut in `2^bits` parts.
fn cell_of(v: f64, min: f64, max: f64, bits: u32) -> u32 {
    let cells = f64::from(1u32 << bits);
    (((v - min) / (max - min)) * cells).clamp(0.0, cells - 1.0) as u32
}

/// A place's geohash: latitude in the even bits, longitude in the odd.
fn encode(lon: f64, lat: f64) -> u64 {
    let lat_cell = cell_of(lat, LAT_MIN, LAT_MAX, STEP);
    let lon_cell = cell_of(lon, LON_MIN, LON_MAX, STEP);
    spread(lat_cell) | (spread(lon_cell) << 1)
}

/// The centre of the cell a geohash names, as (longitude, latitude).
fn decode(hash: u64) -> (f64, f64) {
    let (lat_cell, lon_cell) = (squash(hash), squash(hash >> 1));
    let cells = f64::from(1u32 << STEP);
    let middle = |c: u32, min: f64, max: f64| {
        let lo = min + (max - min) * f64::from(c) / cells;
        let hi = min + (max - min) * (f64::from(c) + 1.0) / cells;
        ((lo + hi) / 2.0).clamp(min, max)
    };
    (
        middle(lon_cell, LON_MIN, LON_MAX),
        middle(lat_cell, LAT_MIN, LAT_MAX),
    )
}

/// The standard 11-character geohash of a place (latitudes from -90 to 90, the last
/// character zero, as Redis gives it).
fn standard_geohash(lon: f64, lat: f64) -> String {
    let bits =
        spread(cell_of(lat, -90.0, 90.0, STEP)) | (spread(cell_of(lon, -180.0, 180.0, STEP)) << 1);
    (0..11)
        .map(|i| {
            let idx = if i == 10 {
                0
            } else {
                (bits >> (52 - (i + 1) * 5)) & 0x1f
            };
            GEOHASH_ALPHABET.get(idx as usize).copied().unwrap_or(b'0') as char
        })
        .collect()
}

/// The great-circle distance in metres between two places.
fn distance(lon1: f64, lat1: f64, lon2: f64, lat2: f64) -> f64 {
    let (lat1, lat2) = (lat1.to_radians(), lat2.to_radians());
    let u = ((lat2 - lat1) / 2.0).sin();
    let v = ((lon2.to_radians() - lon1.to_radians()) / 2.0).sin();
    2.0 * EARTH_RADIUS * (u * u + lat1.cos() * lat2.cos() * v * v).sqrt().asin()
}

/// Metres in one of the units GEO commands take.
fn unit(b: &[u8]) -> Result<f64, String> {
    match b.to_ascii_lowercase().as_slice() {
        b"m" => Ok(1.0),
        b"km" => Ok(1000.0),
        b"ft" => Ok(0.3048),
        b"mi" => Ok(1609.34),
        _ => Err("ERR unsupported unit provided. please use M, KM, FT, MI".into()),
    }
}

fn float(b: &[u8]) -> Result<f64, String> {
    std::str::from_utf8(b)
        .ok()
        .and_then(|s| s.trim().parse::<f64>().ok())
        .filter(|v| v.is_finite())
        .ok_or_else(|| "ERR value is not a valid float".to_string())
}

/// A longitude and latitude from two arguments, checked against what a geohash covers.
fn position(lon: &[u8], lat: &[u8]) -> Result<(f64, f64), String> {
    let (lon, lat) = (float(lon)?, float(lat)?);
    if !(LON_MIN..=LON_MAX).contains(&lon) || !(LAT_MIN..=LAT_MAX).contains(&lat) {
        return Err(format!(
            "ERR invalid longitude,latitude pair {lon:.6},{lat:.6}"
        ));
    }
    Ok((lon, lat))
}

/// A coordinate as Redis shows it: up to 17 significant digits.
fn coordinate(v: f64) -> String {
    let text = format!("{v:.17}");
    let digits_before = text.trim_start_matches('-').find('.').unwrap_or(0);
    let keep = 17usize.saturating_sub(digits_before).max(1);
    let mut out = format!("{v:.keep$}");
    if out.contains('.') {
        out = out.trim_end_matches('0').trim_end_matches('.').to_string();
    }
    out
}

/// `GEOADD key [NX|XX] [CH] longitude latitude member ...`: ZADD with each place's geohash.
pub(super) fn geoadd(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    let mut i = 2;
    let (mut nx, mut xx) = (false, false);
    while let Some(word) = a.get(i).map(|w| upper(w)) {
        match word.as_str() {
            "NX" => nx = true,
            "XX" => xx = true,
            "CH" => {}
            _ => break,
        }
        i += 1;
    }
    if nx && xx {
        return Err(syntax());
    }
    let rest = &a[i..];
    if rest.is_empty() || !rest.len().is_multiple_of(3) {
        return Err(syntax());
    }
    let mut scores = Vec::with_capacity(rest.len() / 3);
    for place in rest.chunks(3) {
        let [lon, lat, _] = place else {
            return Err(syntax());
        };
        let (lon, lat) = position(lon, lat)?;
        scores.push(encode(lon, lat).to_string().into_bytes());
    }
    let mut argv: Vec<&[u8]> = a[..i].to_vec();
    for (place, score) in rest.chunks(3).zip(&scores) {
        argv.push(score);
        argv.push(place.get(2).copied().unwrap_or_default());
    }
    super::zsets::zadd(cx, &argv)
}

/// The geohash of each member asked for (`None`: no such member), from `key`.
fn hashes(cx: &Ctx<'_, '_>, key: &[u8], members: &[&[u8]]) -> Result<Vec<Option<u64>>, String> {
    let z = ZSet::read(cx, &cx.key(key))?;
    let mut out = Vec::with_capacity(members.len());
    for m in members {
        let score = match &z {
            Some(z) => z.score(cx.shared, m)?,
            None => None,
        };
        out.push(score.map(|s| s as u64));
    }
    Ok(out)
}

/// `GEOPOS key member ...`.
pub(super) fn geopos(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    let found = hashes(cx, a[1], &a[2..])?;
    cx.out.array(found.len());
    for h in found {
        match h {
            Some(h) => {
                let (lon, lat) = decode(h);
                cx.out.array(2);
                cx.out.bulk(coordinate(lon).as_bytes());
                cx.out.bulk(coordinate(lat).as_bytes());
            }
            None => cx.out.null_array(),
        }
    }
    Ok(())
}

/// `GEOHASH key member ...`.
pub(super) fn geohash(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    let found = hashes(cx, a[1], &a[2..])?;
    cx.out.array(found.len());
    for h in found {
        match h {
            Some(h) => {
                let (lon, lat) = decode(h);
                cx.out.bulk(standard_geohash(lon, lat).as_bytes());
            }
            None => cx.out.null(),
        }
    }
    Ok(())
}

/// `GEODIST key member1 member2 [M|KM|FT|MI]`.
pub(super) fn geodist(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    let per = match a.get(4) {
        Some(u) if a.len() == 5 => unit(u)?,
        None => 1.0,
        Some(_) => return Err(syntax()),
    };
    let found = hashes(cx, a[1], &a[2..4])?;
    match (
        found.first().copied().flatten(),
        found.get(1).copied().flatten(),
    ) {
        (Some(x), Some(y)) => {
            let ((lon1, lat1), (lon2, lat2)) = (decode(x), decode(y));
            let d = distance(lon1, lat1, lon2, lat2) / per;
            cx.out.bulk(format!("{d:.4}").as_bytes());
        }
        _ => cx.out.null(),
    }
    Ok(())
}

/// Where a search looks: around a point, within a radius or a box (width, height), in
/// metres.
struct Area {
    lon: f64,
    lat: f64,
    shape: Shape,
}

enum Shape {
    Radius(f64),
    Box(f64, f64),
}

impl Area {
    /// The distance of a place from the centre, if the place lies in the area.
    fn holds(&self, lon: f64, lat: f64) -> Option<f64> {
        let d = distance(self.lon, self.lat, lon, lat);
        match self.shape {
            Shape::Radius(r) => (d <= r).then_some(d),
            Shape::Box(w, h) => {
                let north_south = distance(lon, lat, lon, self.lat);
                let east_west = distance(lon, lat, self.lon, lat);
                (north_south <= h / 2.0 && east_west <= w / 2.0).then_some(d)
            }
        }
    }

    /// The area's bounding box: (west, south, east, north) in degrees.
    fn bounds(&self) -> (f64, f64, f64, f64) {
        let (ns, ew) = match self.shape {
            Shape::Radius(r) => (r, r),
            Shape::Box(w, h) => (h / 2.0, w / 2.0),
        };
        let lat_delta = (ns / EARTH_RADIUS).to_degrees();
        let lon_delta = |at: f64| (ew / EARTH_RADIUS / at.to_radians().cos()).to_degrees();
        // The edge nearer the equator is the wider: north of it, the southern edge.
        let lon_delta = if self.lat < 0.0 {
            lon_delta(self.lat - lat_delta)
        } else {
            lon_delta(self.lat + lat_delta)
        };
        (
            self.lon - lon_delta,
            self.lat - lat_delta,
            self.lon + lon_delta,
            self.lat + lat_delta,
        )
    }

    /// The geohash cells to walk, as score ranges, in the order Redis walks them (so that
    /// an unsorted answer comes in Redis's order): the cell of the centre, then its
    /// neighbours north, south, east, west, north-east, north-west, south-east and
    /// south-west, at the precision Redis estimates from the radius, one coarser when the
    /// neighbours do not reach the bounding box, less the neighbours wholly outside it.
    fn ranges(&self) -> Vec<(u64, u64)> {
        let radius = match self.shape {
            Shape::Radius(r) => r,
            Shape::Box(w, h) => ((w / 2.0).powi(2) + (h / 2.0).powi(2)).sqrt(),
        };
        let (west, south, east, north) = self.bounds();
        let mut bits = estimate_bits(radius, self.lat);
        let cell_span = |bits: u32| {
            let cells = f64::from(1u32 << bits);
            ((LAT_MAX - LAT_MIN) / cells, (LON_MAX - LON_MIN) / cells)
        };
        let centre = |bits: u32| {
            (
                i64::from(cell_of(self.lat, LAT_MIN, LAT_MAX, bits)),
                i64::from(cell_of(self.lon, LON_MIN, LON_MAX, bits)),
            )
        };
        // The neighbours' far edges, as Redis finds them (a neighbour past the last cell
        // wraps to the first).
        let (lat_c, lon_c) = centre(bits);
        let (h, w) = cell_span(bits);
        let cells = 1i64 << bits;
        let edge = |c: i64, min: f64, span: f64| min + span * c.rem_euclid(cells) as f64;
        if bits > 1
            && (edge(lat_c + 1, LAT_MIN, h) + h < north
                || edge(lat_c - 1, LAT_MIN, h) > south
                || edge(lon_c + 1, LON_MIN, w) + w < east
                || edge(lon_c - 1, LON_MIN, w) > west)
        {
            bits -= 1;
        }
        let (lat_c, lon_c) = centre(bits);
        let (h, w) = cell_span(bits);
        let cells = 1i64 << bits;
        let (lat_lo, lon_lo) = (LAT_MIN + h * lat_c as f64, LON_MIN + w * lon_c as f64);
        // Neighbours wholly outside the bounding box are left out.
        let keep_south = bits < 2 || lat_lo >= south;
        let keep_north = bits < 2 || lat_lo + h <= north;
        let keep_west = bits < 2 || lon_lo >= west;
        let keep_east = bits < 2 || lon_lo + w <= east;
        let order: [(i64, i64, bool); 9] = [
            (0, 0, true),
            (1, 0, keep_north),
            (-1, 0, keep_south),
            (0, 1, keep_east),
            (0, -1, keep_west),
            (1, 1, keep_north && keep_east),
            (1, -1, keep_north && keep_west),
            (-1, 1, keep_south && keep_east),
            (-1, -1, keep_south && keep_west),
        ];
        let shift = 2 * (STEP - bits);
        let mut ranges: Vec<(u64, u64)> = Vec::new();
        for (dlat, dlon, keep) in order {
            if !keep {
                continue;
            }
            let lat = (lat_c + dlat).rem_euclid(cells) as u32;
            let lon = (lon_c + dlon).rem_euclid(cells) as u32;
            let cell = spread(lat) | (spread(lon) << 1);
            let range = (cell << shift, (cell + 1) << shift);
            if !ranges.contains(&range) {
                ranges.push(range);
            }
        }
        ranges
    }
}

/// The geohash precision (bits per coordinate) Redis searches a radius at: cells about as
/// large as the radius, coarser near the poles.
fn estimate_bits(radius: f64, lat: f64) -> u32 {
    if radius == 0.0 {
        return STEP;
    }
    let (mut range, mut bits) = (radius, 1i32);
    while range < 20037726.37 {
        range *= 2.0;
        bits += 1;
    }
    bits -= 2;
    if lat.abs() > 66.0 {
        bits -= 1;
        if lat.abs() > 80.0 {
            bits -= 1;
        }
    }
    bits.clamp(1, STEP as i32) as u32
}

/// A place a search found.
struct Found {
    member: Vec<u8>,
    hash: u64,
    dist: f64,
    lon: f64,
    lat: f64,
}

/// What a search asks for besides its area.
#[derive(Default)]
struct Options {
    with_coord: bool,
    with_dist: bool,
    with_hash: bool,
    count: Option<(u64, bool)>,
    /// `Some(true)`: nearest first; `Some(false)`: farthest first.
    ascending: Option<bool>,
    /// STORE or STOREDIST, with whether it stores distances.
    store: Option<(Vec<u8>, bool)>,
}

/// Every place of the sorted set at `key` in `area`, sorted and cut as `o` asks.
fn search(cx: &Ctx<'_, '_>, key: &[u8], area: &Area, o: &Options) -> Result<Vec<Found>, String> {
    let Some(z) = ZSet::read(cx, key)? else {
        return Ok(Vec::new());
    };
    let mut found = Vec::new();
    // With COUNT ANY the search stops at the count; otherwise it sees every match.
    let enough = o.count.filter(|(_, any)| *any).map(|(n, _)| n as usize);
    for (lo, hi) in area.ranges() {
        let bounds = (
            Bound::Included(store::score_key(z.version(), lo as f64, b"")),
            Bound::Excluded(store::score_key(z.version(), hi as f64, b"")),
        );
        z.walk_scores(cx.shared, bounds.0, bounds.1, false, |score, member| {
            let hash = score as u64;
            let (lon, lat) = decode(hash);
            if let Some(dist) = area.holds(lon, lat) {
                found.push(Found {
                    member: member.to_vec(),
                    hash,
                    dist,
                    lon,
                    lat,
                });
            }
            enough.is_none_or(|n| found.len() < n)
        })?;
        if enough.is_some_and(|n| found.len() >= n) {
            break;
        }
    }
    // COUNT without ANY or an order sorts nearest first, as Redis does.
    let order = o
        .ascending
        .or(o.count.filter(|(_, any)| !any).map(|_| true));
    if let Some(asc) = order {
        found.sort_by(|x, y| {
            let by = x.dist.total_cmp(&y.dist);
            if asc { by } else { by.reverse() }
        });
    }
    if let Some((n, _)) = o.count {
        found.truncate(n as usize);
    }
    Ok(found)
}

/// Parses a search's options from `args`; `search`: GEOSEARCH's words (FROMMEMBER, BYBOX,
/// ...) are taken there, not here.
fn options(args: &[&[u8]], may_store: bool) -> Result<(Options, Vec<usize>), String> {
    let mut o = Options::default();
    let mut rest = Vec::new();
    let mut i = 0;
    while let Some(arg) = args.get(i) {
        match upper(arg).as_str() {
            "WITHCOORD" => o.with_coord = true,
            "WITHDIST" => o.with_dist = true,
            "WITHHASH" => o.with_hash = true,
            "ASC" => o.ascending = Some(true),
            "DESC" => o.ascending = Some(false),
            "ANY" => {
                let Some((n, _)) = o.count else {
                    return Err("ERR the ANY argument requires COUNT argument".into());
                };
                o.count = Some((n, true));
            }
            "COUNT" => {
                let n = args.get(i + 1).ok_or_else(syntax)?;
                let n = super::int_arg(n)?;
                if n <= 0 {
                    return Err("ERR COUNT must be > 0".into());
                }
                let any = o.count.is_some_and(|(_, any)| any);
                o.count = Some((n as u64, any));
                i += 1;
            }
            word @ ("STORE" | "STOREDIST") if may_store => {
                let key = args.get(i + 1).ok_or_else(syntax)?;
                o.store = Some((key.to_vec(), word == "STOREDIST"));
                i += 1;
            }
            _ => rest.push(i),
        }
        i += 1;
    }
    if o.store.is_some() && (o.with_coord || o.with_dist || o.with_hash) {
        return Err(
            "ERR STORE option in GEORADIUS is not compatible with WITHDIST, WITHHASH and \
             WITHCOORD options"
                .into(),
        );
    }
    Ok((o, rest))
}

/// The centre of a search from a member of the set at `key`.
fn member_position(cx: &Ctx<'_, '_>, key: &[u8], member: &[u8]) -> Result<(f64, f64), String> {
    match hashes(cx, key, &[member])?.first().copied().flatten() {
        Some(h) => Ok(decode(h)),
        None => Err("ERR could not decode requested zset member".into()),
    }
}

/// GEORADIUS, GEORADIUSBYMEMBER and their _RO forms.
pub(super) fn georadius(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    let name = a[0].to_ascii_lowercase();
    let by_member = name.starts_with(b"georadiusbymember");
    let read_only = name.ends_with(b"_ro");
    let fixed = if by_member { 5 } else { 6 };
    if a.len() < fixed {
        return Err(super::wrong_args(&String::from_utf8_lossy(&name)));
    }
    let key = cx.key(a[1]);
    let (radius, per) = (float(a[fixed - 2])?, unit(a[fixed - 1])?);
    if radius < 0.0 {
        return Err("ERR radius cannot be negative".into());
    }
    let (o, rest) = options(&a[fixed..], !read_only)?;
    if !rest.is_empty() {
        return Err(syntax());
    }
    let store_key = o.store.as_ref().map(|(k, _)| cx.key(k));
    let mut keys = vec![key.as_slice()];
    keys.extend(store_key.as_deref());
    let _g = cx.lock(keys);
    if ZSet::read(cx, &key)?.is_none() {
        return empty(cx, store_key.is_some());
    }
    let (lon, lat) = if by_member {
        member_position(cx, a[1], a[2])?
    } else {
        position(a[2], a[3])?
    };
    let area = Area {
        lon,
        lat,
        shape: Shape::Radius(radius * per),
    };
    let found = search(cx, &key, &area, &o)?;
    answer(cx, found, &o, store_key.as_deref(), per)
}

/// GEOSEARCH and GEOSEARCHSTORE.
pub(super) fn geosearch(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    let store = a[0].eq_ignore_ascii_case(b"geosearchstore");
    let (src, dst) = if store {
        (a[2], Some(a[1]))
    } else {
        (a[1], None)
    };
    let first = if store { 3 } else { 2 };
    let (mut o, rest) = options(&a[first..], false)?;
    let (mut from_member, mut from_lonlat, mut shape, mut per) = (None, None, None, 1.0);
    let arg = |i: usize| rest.get(i).and_then(|&j| a.get(first + j)).copied();
    let mut i = 0;
    while let Some(word) = arg(i) {
        match upper(word).as_str() {
            "FROMMEMBER" if from_member.is_none() && from_lonlat.is_none() => {
                from_member = Some(arg(i + 1).ok_or_else(syntax)?);
                i += 2;
            }
            "FROMLONLAT" if from_member.is_none() && from_lonlat.is_none() => {
                let (lon, lat) = (
                    arg(i + 1).ok_or_else(syntax)?,
                    arg(i + 2).ok_or_else(syntax)?,
                );
                from_lonlat = Some(position(lon, lat)?);
                i += 3;
            }
            "FROMMEMBER" | "FROMLONLAT" => return Err(syntax()),
            "BYRADIUS" if shape.is_none() => {
                let r = float(arg(i + 1).ok_or_else(syntax)?)?;
                if r < 0.0 {
                    return Err("ERR radius cannot be negative".into());
                }
                per = unit(arg(i + 2).ok_or_else(syntax)?)?;
                shape = Some(Shape::Radius(r * per));
                i += 3;
            }
            "BYBOX" if shape.is_none() => {
                let w = float(arg(i + 1).ok_or_else(syntax)?)?;
                let h = float(arg(i + 2).ok_or_else(syntax)?)?;
                if w < 0.0 || h < 0.0 {
                    return Err("ERR height or width cannot be negative".into());
                }
                per = unit(arg(i + 3).ok_or_else(syntax)?)?;
                shape = Some(Shape::Box(w * per, h * per));
                i += 4;
            }
            "BYRADIUS" | "BYBOX" => return Err(syntax()),
            "STOREDIST" if store => {
                o.store = Some((Vec::new(), true));
                i += 1;
            }
            _ => return Err(syntax()),
        }
    }
    if from_member.is_none() && from_lonlat.is_none() {
        return Err(
            "ERR exactly one of FROMMEMBER or FROMLONLAT can be specified for GEOSEARCH".into(),
        );
    }
    let Some(shape) = shape else {
        return Err("ERR exactly one of BYRADIUS and BYBOX can be specified for GEOSEARCH".into());
    };
    if store && (o.with_coord || o.with_dist || o.with_hash) {
        return Err(syntax());
    }
    let key = cx.key(src);
    let dst_key = dst.map(|d| cx.key(d));
    if let Some(d) = dst {
        let dist = o.store.as_ref().is_some_and(|(_, dist)| *dist);
        o.store = Some((d.to_vec(), dist));
    }
    let mut keys = vec![key.as_slice()];
    keys.extend(dst_key.as_deref());
    let _g = cx.lock(keys);
    if ZSet::read(cx, &key)?.is_none() {
        return empty(cx, dst.is_some());
    }
    let (lon, lat) = match (from_member, from_lonlat) {
        (Some(m), _) => member_position(cx, src, m)?,
        (None, Some(p)) => p,
        (None, None) => return Err(syntax()),
    };
    let area = Area { lon, lat, shape };
    let found = search(cx, &key, &area, &o)?;
    answer(cx, found, &o, dst_key.as_deref(), per)
}

/// The answer of a search of a key that does not exist: nothing, and nothing stored.
fn empty(cx: &mut Ctx<'_, '_>, store: bool) -> Outcome {
    if store {
        cx.out.int(0);
    } else {
        cx.out.array(0);
    }
    Ok(())
}

/// Replies with what a search found, or stores it at `store` and replies with the count.
fn answer(
    cx: &mut Ctx<'_, '_>,
    found: Vec<Found>,
    o: &Options,
    store: Option<&[u8]>,
    per: f64,
) -> Outcome {
    if let Some(dst) = store {
        let by_dist = o.store.as_ref().is_some_and(|(_, dist)| *dist);
        let items: Vec<(Vec<u8>, f64)> = found
            .into_iter()
            .map(|f| {
                let score = if by_dist { f.dist / per } else { f.hash as f64 };
                (f.member, score)
            })
            .collect();
        super::zrange::store_members(cx, dst, &items)?;
        cx.out.int(items.len() as i64);
        return Ok(());
    }
    let extras = usize::from(o.with_dist) + usize::from(o.with_hash) + usize::from(o.with_coord);
    cx.out.array(found.len());
    for f in found {
        if extras == 0 {
            cx.out.bulk(&f.member);
            continue;
        }
        cx.out.array(1 + extras);
        cx.out.bulk(&f.member);
        if o.with_dist {
            cx.out.bulk(format!("{:.4}", f.dist / per).as_bytes());
        }
        if o.with_hash {
            cx.out.int(f.hash as i64);
        }
        if o.with_coord {
            cx.out.array(2);
            cx.out.bulk(coordinate(f.lon).as_bytes());
            cx.out.bulk(coordinate(f.lat).as_bytes());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_place_comes_back_from_its_geohash_within_a_cell() {
        for (lon, lat) in [
            (13.361389, 38.115556),
            (-122.33207, 47.60621),
            (179.99, -85.0),
        ] {
            let (x, y) = decode(encode(lon, lat));
            assert!(
                (x - lon).abs() < 1e-5 && (y - lat).abs() < 1e-5,
                "{lon},{lat}: {x},{y}"
            );
        }
    }

    #[test]
    fn distances_and_geohashes_are_redis_figures() {
        // Palermo and Catania, from Redis's GEODIST documentation: 166274.1516 m.
        let (p, c) = (encode(13.361389, 38.115556), encode(15.087269, 37.502669));
        let ((x1, y1), (x2, y2)) = (decode(p), decode(c));
        assert_eq!(format!("{:.4}", distance(x1, y1, x2, y2)), "166274.1516");
        // From Redis's GEOHASH documentation.
        assert_eq!(standard_geohash(x1, y1), "sqc8b49rny0");
        assert_eq!(standard_geohash(x2, y2), "sqdtr74hyu0");
        // Palermo's score, from Redis's GEOADD example (ZSCORE Sicily Palermo).
        assert_eq!(p, 3479099956230698);
    }
}
